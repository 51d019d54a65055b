//! `tinymq acl add|list|remove`: who may do what to which topic, group, transactional id or
//! the cluster. `add` takes one ACL; `list` and `remove` take the same flags as a filter
//! (each flag left out matches anything), and `remove` prints what it removed.

use clap::Subcommand;
use tinymq_auth::{
    AclEntry, AclOperation, AclPermission, PatternType, ResourceType, CLUSTER_RESOURCE_NAME,
};
use tinymq_client::{AclFilter, Admin};
use tinymq_protocol::messages as m;

use crate::{outln, Bootstrap};

#[derive(Subcommand, Debug)]
pub enum AclCommand {
    /// Add an ACL (adding one that exists changes nothing).
    Add {
        /// Who: User:NAME, or User:* for every authenticated user.
        #[arg(long)]
        principal: String,
        #[command(flatten)]
        resource: ResourceArgs,
        /// The name is a prefix: the ACL covers every resource whose name starts with it.
        #[arg(long)]
        prefixed: bool,
        /// What the principal may (or, with --deny, may not) do (any case: `read` or `READ`).
        #[arg(long, value_enum, ignore_case = true)]
        operation: Operation,
        /// A DENY ACL: it wins over every ALLOW.
        #[arg(long)]
        deny: bool,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
    /// List ACLs, all or those the flags select.
    List {
        #[command(flatten)]
        filter: FilterArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
    /// Remove the ACLs the flags select (at least one flag) and print them.
    Remove {
        #[command(flatten)]
        filter: FilterArgs,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
}

/// The resource of an ACL: exactly one of these.
#[derive(clap::Args, Debug)]
#[group(required = true, multiple = false)]
pub struct ResourceArgs {
    /// A topic (with --prefixed: every topic starting with it; "*": every topic).
    #[arg(long)]
    topic: Option<String>,
    /// A consumer group.
    #[arg(long)]
    group: Option<String>,
    /// The cluster itself (users, ACLs, quotas, brokers, reassignments).
    #[arg(long)]
    cluster: bool,
    /// A transactional id.
    #[arg(long)]
    transactional_id: Option<String>,
}

impl ResourceArgs {
    fn resource(&self) -> Option<(ResourceType, String)> {
        if let Some(t) = &self.topic {
            return Some((ResourceType::Topic, t.clone()));
        }
        if let Some(g) = &self.group {
            return Some((ResourceType::Group, g.clone()));
        }
        if let Some(x) = &self.transactional_id {
            return Some((ResourceType::TransactionalId, x.clone()));
        }
        self.cluster
            .then(|| (ResourceType::Cluster, CLUSTER_RESOURCE_NAME.to_string()))
    }
}

/// A filter: each flag left out matches anything.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("resource").multiple(false).args(["topic", "group", "cluster", "transactional_id"])))]
pub struct FilterArgs {
    /// Only ACLs of this principal (User:NAME).
    #[arg(long)]
    principal: Option<String>,
    /// Only ACLs of this topic name (literal or prefix, as stored).
    #[arg(long)]
    topic: Option<String>,
    /// Only ACLs of this group name.
    #[arg(long)]
    group: Option<String>,
    /// Only ACLs of the cluster.
    #[arg(long)]
    cluster: bool,
    /// Only ACLs of this transactional id.
    #[arg(long)]
    transactional_id: Option<String>,
    /// Only prefixed ACLs.
    #[arg(long)]
    prefixed: bool,
    /// Only ACLs of this operation (any case).
    #[arg(long, value_enum, ignore_case = true)]
    operation: Option<Operation>,
    /// Only DENY ACLs.
    #[arg(long)]
    deny: bool,
}

impl FilterArgs {
    fn is_empty(&self) -> bool {
        self.principal.is_none()
            && self.resource().is_none()
            && !self.prefixed
            && self.operation.is_none()
            && !self.deny
    }

    fn resource(&self) -> Option<(ResourceType, String)> {
        ResourceArgs {
            topic: self.topic.clone(),
            group: self.group.clone(),
            cluster: self.cluster,
            transactional_id: self.transactional_id.clone(),
        }
        .resource()
    }

    fn to_wire(&self) -> AclFilter {
        let (resource_type, resource_name) = match self.resource() {
            Some((t, name)) => (resource_type_wire(t), name),
            None => (m::ResourceType::Unspecified, String::new()),
        };
        AclFilter {
            principal: self.principal.clone().unwrap_or_default(),
            resource_type: resource_type.into(),
            resource_name,
            pattern_type: self.prefixed.then_some(m::PatternType::Prefixed.into()),
            operation: self
                .operation
                .map_or(m::AclOperation::Unspecified, |o| operation_wire(o.acl()))
                .into(),
            permission: self.deny.then_some(m::AclPermission::Deny.into()),
        }
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum Operation {
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
}

impl Operation {
    fn acl(self) -> AclOperation {
        match self {
            Operation::Read => AclOperation::Read,
            Operation::Write => AclOperation::Write,
            Operation::Create => AclOperation::Create,
            Operation::Delete => AclOperation::Delete,
            Operation::Alter => AclOperation::Alter,
            Operation::Describe => AclOperation::Describe,
        }
    }
}

fn resource_type_wire(t: ResourceType) -> m::ResourceType {
    match t {
        ResourceType::Topic => m::ResourceType::Topic,
        ResourceType::Group => m::ResourceType::Group,
        ResourceType::Cluster => m::ResourceType::Cluster,
        ResourceType::TransactionalId => m::ResourceType::TransactionalId,
    }
}

fn operation_wire(o: AclOperation) -> m::AclOperation {
    match o {
        AclOperation::Read => m::AclOperation::Read,
        AclOperation::Write => m::AclOperation::Write,
        AclOperation::Create => m::AclOperation::Create,
        AclOperation::Delete => m::AclOperation::Delete,
        AclOperation::Alter => m::AclOperation::Alter,
        AclOperation::Describe => m::AclOperation::Describe,
    }
}

fn resource_type_name(t: ResourceType) -> &'static str {
    match t {
        ResourceType::Topic => "topic",
        ResourceType::Group => "group",
        ResourceType::Cluster => "cluster",
        ResourceType::TransactionalId => "transactional-id",
    }
}

fn pattern_name(p: PatternType) -> &'static str {
    match p {
        PatternType::Literal => "literal",
        PatternType::Prefixed => "prefixed",
    }
}

fn permission_name(p: AclPermission) -> &'static str {
    match p {
        AclPermission::Allow => "ALLOW",
        AclPermission::Deny => "DENY",
    }
}

/// `ALLOW User:alice READ topic orders (literal)`; `DENY User:bob ALTER on the cluster` (the
/// cluster has one name and no pattern, so neither is shown).
fn text(a: &AclEntry) -> String {
    if a.resource_type == ResourceType::Cluster {
        return format!(
            "{} {} {} on the cluster",
            permission_name(a.permission),
            a.principal,
            a.operation.name()
        );
    }
    format!(
        "{} {} {} {} {} ({})",
        permission_name(a.permission),
        a.principal,
        a.operation.name(),
        resource_type_name(a.resource_type),
        a.resource_name,
        pattern_name(a.pattern_type)
    )
}

fn json(a: &AclEntry) -> serde_json::Value {
    serde_json::json!({
        "principal": a.principal,
        "resource_type": resource_type_name(a.resource_type),
        "resource_name": a.resource_name,
        "pattern_type": pattern_name(a.pattern_type),
        "operation": a.operation.name(),
        "permission": permission_name(a.permission),
    })
}

pub async fn run(command: AclCommand) -> anyhow::Result<()> {
    match command {
        AclCommand::Add {
            principal,
            resource,
            prefixed,
            operation,
            deny,
            bootstrap,
        } => {
            let (resource_type, resource_name) = resource.resource().ok_or_else(|| {
                anyhow::anyhow!("give --topic, --group, --cluster or --transactional-id")
            })?;
            let acl = AclEntry {
                principal,
                resource_type,
                resource_name,
                pattern_type: if prefixed {
                    PatternType::Prefixed
                } else {
                    PatternType::Literal
                },
                operation: operation.acl(),
                permission: if deny {
                    AclPermission::Deny
                } else {
                    AclPermission::Allow
                },
            };
            Admin::new(bootstrap.client_config()?)?
                .create_acls(std::slice::from_ref(&acl))
                .await?;
            outln!("added {}", text(&acl))
        }
        AclCommand::List {
            filter,
            json: as_json,
            bootstrap,
        } => {
            let acls = Admin::new(bootstrap.client_config()?)?
                .list_acls(&filter.to_wire())
                .await?;
            if as_json {
                let out: Vec<_> = acls.iter().map(json).collect();
                return outln!("{}", serde_json::to_string_pretty(&out)?);
            }
            for a in &acls {
                outln!("{}", text(a))?;
            }
            Ok(())
        }
        AclCommand::Remove { filter, bootstrap } => {
            anyhow::ensure!(
                !filter.is_empty(),
                "acl remove needs at least one of --principal, --topic, --group, --cluster, --transactional-id, --prefixed, --operation, --deny"
            );
            let removed = Admin::new(bootstrap.client_config()?)?
                .delete_acls(&filter.to_wire())
                .await?;
            for a in &removed {
                outln!("removed {}", text(a))?;
            }
            if removed.is_empty() {
                outln!("no ACL matched")?;
            }
            Ok(())
        }
    }
}
