"""confluent-kafka (librdkafka inside) driven by crates/cli/tests/kafka_clients_confluent.rs and
kafka_clients_cross.rs against tinymq's Kafka listener.

    confluent_clients.py MODE BOOTSTRAP ARGS...

Each mode checks what it can see itself and prints JSON lines on stdout, the last one the
summary the Rust test asserts on; any failure prints {"error": ...} and exits 1. Every wait is
bounded (WAIT_S), so a missing answer fails the run instead of hanging it.
"""

import json
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, ConfigResource, NewPartitions, NewTopic,
                                   ResourceType)

WAIT_S = 60


class Failed(Exception):
    pass


def out(**fields):
    print(json.dumps(fields), flush=True)


def text(data):
    return None if data is None else data.decode("utf-8", "replace")


def record(msg):
    return {
        "partition": msg.partition(),
        "offset": msg.offset(),
        "timestamp": msg.timestamp()[1],
        "key": text(msg.key()),
        "value": text(msg.value()),
        "headers": [[k, text(v)] for k, v in (msg.headers() or [])],
    }


def producer(bootstrap, **conf):
    return Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": WAIT_S * 1000, **conf})


def consumer(bootstrap, group, **conf):
    return Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        **conf,
    })


def produce_all(p, topic, records):
    """Produces (key, value, headers) tuples; returns each record's (partition, offset)."""
    acks = [None] * len(records)
    errors = []

    def delivered(index):
        def report(err, msg):
            if err is not None:
                errors.append(f"record {index}: {err}")
            else:
                acks[index] = (msg.partition(), msg.offset())
        return report

    for index, (key, value, headers) in enumerate(records):
        p.produce(topic, key=key, value=value, headers=headers, on_delivery=delivered(index))
        p.poll(0)
    left = p.flush(WAIT_S)
    if left or errors or None in acks:
        raise Failed(f"{left} undelivered, errors {errors[:5]}")
    return acks


def read_from_beginning(bootstrap, topic, count):
    """Reads COUNT records of every partition from the beginning, without a group."""
    c = consumer(bootstrap, "unused", **{"enable.partition.eof": False})
    try:
        partitions = c.list_topics(topic, timeout=WAIT_S).topics[topic].partitions
        c.assign([TopicPartition(topic, p, 0) for p in partitions])
        got = []
        deadline = time.monotonic() + WAIT_S
        while len(got) < count:
            if time.monotonic() > deadline:
                raise Failed(f"read {len(got)} of {count} records of {topic}")
            msg = c.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                raise Failed(f"consume: {msg.error()}")
            got.append(record(msg))
        return got
    finally:
        c.close()


def idempotent(bootstrap, topic, codec, count):
    """An idempotent producer's COUNT records with CODEC batches: each partition holds them
    once, in the order sent, at the offsets acknowledged."""
    count = int(count)
    p = producer(bootstrap, **{"enable.idempotence": True, "compression.type": codec,
                               "linger.ms": 20})
    # Repetitive values, so a compressed batch is much smaller than the records.
    records = [(f"key{i % 7}", f"{codec}-{i:06d}-" + "x" * 200, [("i", str(i))])
               for i in range(count)]
    acks = produce_all(p, topic, records)
    got = read_from_beginning(bootstrap, topic, count)
    sent = {}
    for (key, value, _), (partition, offset) in zip(records, acks):
        sent.setdefault(partition, []).append((offset, key, value))
    read = {}
    for r in got:
        read.setdefault(r["partition"], []).append((r["offset"], r["key"], r["value"]))
    if read != sent:
        for partition in sorted(set(sent) | set(read)):
            if sent.get(partition) != read.get(partition):
                raise Failed(f"partition {partition}: sent {sent.get(partition, [])[:3]}..., "
                             f"read {read.get(partition, [])[:3]}...")
    out(codec=codec, produced=count, consumed=len(got),
        partitions={str(k): len(v) for k, v in sorted(read.items())})


def group_rebalance(bootstrap, topic, group, assignor):
    """Three members join one by one, then one leaves; after each change the partitions are
    spread over the members, none twice, and every record produced since is consumed."""
    admin_client = AdminClient({"bootstrap.servers": bootstrap})
    partitions = len(partitions_of(admin_client, topic))
    p = producer(bootstrap)
    members = {}
    seen = {}
    phases = []

    def assignments():
        return {name: sorted(tp.partition for tp in c.assignment())
                for name, c in members.items()}

    def balanced():
        got = assignments()
        owned = [part for parts in got.values() for part in parts]
        sizes = [len(parts) for parts in got.values()]
        return (sorted(owned) == list(range(partitions))
                and min(sizes) >= partitions // len(got) and max(sizes) - min(sizes) <= 1)

    def poll_until(done, what):
        deadline = time.monotonic() + WAIT_S
        while not done():
            if time.monotonic() > deadline:
                raise Failed(f"{what}: assignments {assignments()}, seen {len(seen)}")
            for c in list(members.values()):
                msg = c.poll(0.05)
                if msg is not None and not msg.error():
                    key = (msg.partition(), msg.offset())
                    seen[key] = seen.get(key, 0) + 1
                elif msg is not None and msg.error().code() != KafkaError._PARTITION_EOF:
                    raise Failed(f"consume: {msg.error()}")

    def phase(name):
        poll_until(balanced, f"{name}: partitions not spread over {sorted(members)}")
        # Records sent now must reach whoever owns their partition.
        acks = produce_all(p, topic, [(f"{name}-{i}", "v", None) for i in range(4 * partitions)])
        poll_until(lambda: all(a in seen for a in acks), f"{name}: records not consumed")
        phases.append({"phase": name, "assignment": assignments()})
        out(**phases[-1])

    conf = {"partition.assignment.strategy": assignor, "heartbeat.interval.ms": 300,
            "session.timeout.ms": 10000}
    for name in ["a", "b", "c"]:
        members[name] = consumer(bootstrap, group, **conf)
        members[name].subscribe([topic])
        phase(f"{name} joined")
    members.pop("c").close()  # LeaveGroup: the other two take its partitions at once.
    phase("c left")
    for c in members.values():
        c.close()
    out(assignor=assignor, phases=len(phases), records=len(seen),
        members=[len(ph["assignment"]) for ph in phases])


def commit_resume(bootstrap, topic, group):
    """A member reads half, commits, leaves; the next member of the group starts right after
    the commit. Then the group is described, listed and deleted through the AdminClient."""
    acks = produce_all(producer(bootstrap), topic, [(f"r{i}", f"v{i}", None) for i in range(20)])
    if [o for _, o in acks] != list(range(20)):
        raise Failed(f"offsets acknowledged: {acks}")

    def take(c, count):
        got = []
        deadline = time.monotonic() + WAIT_S
        while len(got) < count:
            if time.monotonic() > deadline:
                raise Failed(f"read {len(got)} of {count}")
            msg = c.poll(0.2)
            if msg is not None and msg.error():
                raise Failed(f"consume: {msg.error()}")
            if msg is not None:
                got.append(msg)
        return got

    first = consumer(bootstrap, group)
    first.subscribe([topic])
    read = take(first, 10)
    first.commit(message=read[-1], asynchronous=False)
    committed = first.committed([TopicPartition(topic, 0)], timeout=WAIT_S)[0].offset
    first.close()
    second = consumer(bootstrap, group)
    second.subscribe([topic])
    resumed = take(second, 10)
    second.commit(asynchronous=False)
    second.close()
    keys = [text(m.key()) for m in resumed]
    if committed != 10 or resumed[0].offset() != 10 or keys != [f"r{i}" for i in range(10, 20)]:
        raise Failed(f"committed {committed}, resumed at {resumed[0].offset()} with {keys}")

    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = admin.list_consumer_groups(request_timeout=WAIT_S).result()
    if group not in [g.group_id for g in listed.valid]:
        raise Failed(f"list_consumer_groups: {listed.valid} errors {listed.errors}")
    described = admin.describe_consumer_groups([group], request_timeout=WAIT_S)[group].result()
    deleting = admin.delete_consumer_groups([group], request_timeout=WAIT_S)
    for future in deleting.values():
        future.result()  # raises the group's error, if its deletion failed
    after = admin.list_consumer_groups(request_timeout=WAIT_S).result()
    # What was deleted, as measured: the groups listed before and not after the deletion.
    deleted = sorted({g.group_id for g in listed.valid} - {g.group_id for g in after.valid})
    out(committed=committed, resumed_at=resumed[0].offset(), resumed=len(resumed),
        described_state=str(described.state), deleted=deleted)


def group_consume(bootstrap, topic, group, count):
    """As a member of GROUP, reads COUNT records from where the group's committed offsets say
    (whichever protocol committed them), prints them, commits, leaves."""
    c = consumer(bootstrap, group)
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < int(count):
        if time.monotonic() > deadline:
            raise Failed(f"read {len(got)} of {count} as a member of {group}")
        msg = c.poll(0.2)
        if msg is not None and msg.error():
            raise Failed(f"consume: {msg.error()}")
        if msg is not None:
            got.append(msg)
    c.commit(asynchronous=False)
    c.close()
    for msg in got:
        out(**record(msg))


def admin(bootstrap, topic):
    """AdminClient: create a topic (twice: the second is TOPIC_ALREADY_EXISTS), add
    partitions, describe its configs and the cluster, delete it."""
    a = AdminClient({"bootstrap.servers": bootstrap})
    a.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)],
                    operation_timeout=WAIT_S)[topic].result()
    wait_for(lambda: len(partitions_of(a, topic)) == 3, f"{topic} with 3 partitions")
    try:
        a.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result()
        raise Failed("creating an existing topic succeeded")
    except KafkaException as e:
        if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    a.create_partitions([NewPartitions(topic, 5)], operation_timeout=WAIT_S)[topic].result()
    wait_for(lambda: len(partitions_of(a, topic)) == 5, f"{topic} with 5 partitions")
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = a.describe_configs([resource])[resource].result()
    if not configs:
        raise Failed("describe_configs returned no config entries")
    cluster = a.describe_cluster(request_timeout=WAIT_S).result()
    partitions = len(partitions_of(a, topic))  # read back from the cluster's metadata
    a.delete_topics([topic], operation_timeout=WAIT_S)[topic].result()
    wait_for(lambda: topic not in a.list_topics(timeout=WAIT_S).topics, f"{topic} gone")
    out(created=topic, partitions=partitions,
        configs={name: entry.value for name, entry in sorted(configs.items())},
        cluster_nodes=[f"{n.host}:{n.port}" for n in cluster.nodes], deleted=topic)


def partitions_of(a, topic):
    found = a.list_topics(timeout=WAIT_S).topics.get(topic)
    return [] if found is None or found.error is not None else list(found.partitions)


def wait_for(done, what):
    deadline = time.monotonic() + WAIT_S
    while not done():
        if time.monotonic() > deadline:
            raise Failed(f"waited {WAIT_S} s for {what}")
        time.sleep(0.1)


def produce_one(bootstrap, topic):
    """One record with a key, repeated and null-valued headers and a set timestamp, to
    partition 0; prints where it was stored."""
    p = producer(bootstrap)
    acks = []
    p.produce(topic, key=b"ck", value=b"cv", partition=0, timestamp=1717000000123,
              headers=[("h1", b"x"), ("h2", None), ("h1", b"y")],
              on_delivery=lambda err, msg: acks.append((err, msg)))
    if p.flush(WAIT_S) or len(acks) != 1 or acks[0][0] is not None:
        raise Failed(f"delivery: {acks}")
    msg = acks[0][1]
    out(partition=msg.partition(), offset=msg.offset(), timestamp=msg.timestamp()[1])


def produce_many(bootstrap, topic, count):
    """COUNT records from an idempotent lz4 producer: key k(i % 1000), value the decimal i, so
    a reader can check per partition that nothing is lost, repeated or reordered."""
    count = int(count)
    p = producer(bootstrap, **{"enable.idempotence": True, "compression.type": "lz4",
                               "linger.ms": 20, "batch.size": 262144})
    failed = []
    acked = [0]

    def report(err, _msg):
        if err is not None:
            failed.append(str(err))
        else:
            acked[0] += 1

    for i in range(count):
        while True:
            try:
                p.produce(topic, key=f"k{i % 1000}", value=str(i), on_delivery=report)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                p.poll(0.05)
        if i % 10000 == 0:
            p.poll(0)
    left = p.flush(WAIT_S * 5)
    if left or failed or acked[0] != count:
        raise Failed(f"{left} undelivered, {acked[0]} acknowledged, errors {failed[:5]}")
    out(produced=count)


def steady_acks(bootstrap, topic, count, pace_ms):
    """COUNT records f-000000, f-000001, ... from an idempotent acks=all producer, one every
    PACE_MS to partition 0, each sent at once (linger 0): a steady stream whose
    acknowledgements show when a partition stops and resumes taking writes. Prints one line
    per acknowledgement with when the record was handed to the client and when its
    acknowledgement came (wall-clock seconds: the test compares them with when it killed the
    leader), then the summary."""
    count, pace = int(count), int(pace_ms) / 1000.0
    p = producer(bootstrap, **{"enable.idempotence": True, "acks": "all", "linger.ms": 0})
    failed = []

    def report(sent):
        def on_delivery(err, msg):
            if err is not None:
                failed.append(str(err))
            else:
                out(value=text(msg.value()), offset=msg.offset(), sent=sent, acked=time.time())
        return on_delivery

    for i in range(count):
        p.produce(topic, value=f"f-{i:06}", partition=0, on_delivery=report(time.time()))
        until = time.time() + pace
        while (left := until - time.time()) > 0:
            p.poll(left)  # serves acknowledgements meanwhile; returns early after one
    left = p.flush(WAIT_S)
    if left or failed:
        raise Failed(f"{left} undelivered, errors {failed[:5]}")
    out(done="steady-acks", produced=count)


def consume(bootstrap, topic, count):
    """Prints COUNT records of TOPIC from the beginning of every partition."""
    for r in read_from_beginning(bootstrap, topic, int(count)):
        out(**r)


def read_isolated(bootstrap, topic, isolation):
    """Every value of TOPIC under ISOLATION, reading each partition to its end (the LSO
    under read_committed)."""
    c = consumer(bootstrap, "unused", **{"isolation.level": isolation,
                                         "enable.partition.eof": True})
    try:
        partitions = c.list_topics(topic, timeout=WAIT_S).topics[topic].partitions
        c.assign([TopicPartition(topic, p, 0) for p in partitions])
        values, ended = [], set()
        deadline = time.monotonic() + WAIT_S
        while len(ended) < len(partitions):
            if time.monotonic() > deadline:
                raise Failed(f"reading {topic} ({isolation}) stalled after {len(values)}")
            msg = c.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    ended.add(msg.partition())
                    continue
                raise Failed(f"consume: {msg.error()}")
            values.append(text(msg.value()))
        return values
    finally:
        c.close()


def txn_ctp(bootstrap, source, sink, group, txid, count):
    """Consume-transform-produce in transactions: COUNT values copied from SOURCE to SINK as
    "t<value>", the consumed offsets sent to each transaction with the consumer's group
    metadata; every third transaction also writes "ABORTED" and is aborted, and the consumer
    rewinds to the group's committed offsets. Then read_committed sees each copy once and no
    aborted record, read_uncommitted sees the aborted records too."""
    count = int(count)
    produce_all(producer(bootstrap, **{"enable.idempotence": True}), source,
                [(str(i), str(i), []) for i in range(count)])
    c = consumer(bootstrap, group, **{"isolation.level": "read_committed"})
    p = producer(bootstrap, **{"transactional.id": txid, "linger.ms": 5})
    p.init_transactions(WAIT_S)
    c.subscribe([source])
    copied, transactions, aborted = 0, 0, 0
    deadline = time.monotonic() + 2 * WAIT_S
    while copied < count:
        if time.monotonic() > deadline:
            raise Failed(f"copied {copied} of {count}")
        msgs = c.consume(num_messages=10, timeout=0.5)
        msgs = [m for m in msgs if not m.error()]
        if not msgs:
            continue
        p.begin_transaction()
        for m in msgs:
            p.produce(sink, key=m.key(), value=b"t" + m.value())
        p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(),
                                      WAIT_S)
        transactions += 1
        if transactions % 3 == 0:
            p.produce(sink, key=b"x", value=b"ABORTED")
            p.flush(WAIT_S)
            p.abort_transaction(WAIT_S)
            aborted += 1
            committed = c.committed(c.assignment(), timeout=WAIT_S)
            for tp in committed:
                c.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))
        else:
            p.commit_transaction(WAIT_S)
            copied += len(msgs)
    c.close()
    out(transactions=transactions, aborted=aborted, copied=copied)
    seen = read_isolated(bootstrap, sink, "read_committed")
    wanted = sorted(f"t{i}" for i in range(count))
    if sorted(seen) != wanted:
        extra = [v for v in seen if v not in wanted][:5]
        raise Failed(f"read_committed saw {len(seen)} values, not {count} copies once; "
                     f"extra {extra}")
    everything = read_isolated(bootstrap, sink, "read_uncommitted")
    out(done="txn-ctp", read_committed=len(seen), read_uncommitted=len(everything),
        aborted_seen_uncommitted=everything.count("ABORTED"))


MODES = {
    "txn-ctp": txn_ctp,
    "idempotent": idempotent,
    "group-rebalance": group_rebalance,
    "commit-resume": commit_resume,
    "admin": admin,
    "produce-one": produce_one,
    "consume": consume,
    "produce-many": produce_many,
    "group-consume": group_consume,
    "steady-acks": steady_acks,
}

if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in MODES:
        sys.exit(f"usage: {sys.argv[0]} {'|'.join(MODES)} BOOTSTRAP ARGS...")
    try:
        MODES[sys.argv[1]](*sys.argv[2:])
    except (Failed, KafkaException) as e:
        out(error=f"{type(e).__name__}: {e}")
        sys.exit(1)
