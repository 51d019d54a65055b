package kafkago

// tinymq's own franz-go checks of the admin side of its Kafka listener, through kadm (the
// paths franz-go's kgo suite does not reach: DescribeConfigs, ListOffsets by kind and time,
// Metadata as an admin reads it). Each check is its own test so the counts of
// scripts/kafka-conformance-go.sh mean something. The listener's address is KGO_SEEDS.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// How long one check may wait on the listener before it fails instead of hanging.
const checkTimeout = 60 * time.Second

func seeds(t *testing.T) []string {
	t.Helper()
	addr := os.Getenv("KGO_SEEDS")
	if addr == "" {
		t.Fatal("KGO_SEEDS is not set: the tinymq Kafka listener's address (scripts/kafka-conformance-go.sh sets it)")
	}
	return strings.Split(addr, ",")
}

func clients(t *testing.T, opts ...kgo.Opt) (*kgo.Client, *kadm.Client, context.Context) {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds(t)...)}, opts...)...)
	if err != nil {
		t.Fatalf("kgo client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	t.Cleanup(func() {
		cancel()
		cl.Close()
	})
	return cl, kadm.NewClient(cl), ctx
}

func topicName(t *testing.T) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "kadm-" + hex.EncodeToString(b[:])
}

// createTopic creates a topic with `partitions` partitions and deletes it when the test ends.
func createTopic(t *testing.T, adm *kadm.Client, ctx context.Context, partitions int32) string {
	t.Helper()
	topic := topicName(t)
	resp, err := adm.CreateTopic(ctx, partitions, 1, nil, topic)
	if err != nil || resp.Err != nil {
		t.Fatalf("create topic %s: %v %v", topic, err, resp.Err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
		defer cancel()
		adm.DeleteTopics(ctx, topic)
	})
	return topic
}

func TestTinymqKadmCreateListDeleteTopics(t *testing.T) {
	_, adm, ctx := clients(t)
	topic := topicName(t)
	created, err := adm.CreateTopics(ctx, 3, 1, map[string]*string{"retention.ms": kadm.StringPtr("3600000")}, topic)
	if err != nil || created.Error() != nil {
		t.Fatalf("create: %v %v", err, created.Error())
	}
	again, err := adm.CreateTopics(ctx, 3, 1, nil, topic)
	if err != nil {
		t.Fatalf("create again: %v", err)
	}
	if again.Error() == nil {
		t.Fatalf("creating %s twice succeeded", topic)
	}

	listed, err := adm.ListTopics(ctx, topic)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if !listed.Has(topic) || len(listed[topic].Partitions) != 3 {
		t.Fatalf("listed %+v, want %s with 3 partitions", listed, topic)
	}

	deleted, err := adm.DeleteTopics(ctx, topic)
	if err != nil || deleted.Error() != nil {
		t.Fatalf("delete: %v %v", err, deleted.Error())
	}
	// As with Kafka, a deletion reaches Metadata shortly after DeleteTopics answers.
	for {
		gone, err := adm.ListTopics(ctx, topic)
		if err != nil {
			t.Fatalf("list after delete: %v", err)
		}
		if !gone.Has(topic) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%s still listed %v after delete: %+v", topic, checkTimeout, gone[topic])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestTinymqKadmMetadata(t *testing.T) {
	_, adm, ctx := clients(t)
	topic := createTopic(t, adm, ctx, 2)
	meta, err := adm.Metadata(ctx, topic)
	if err != nil {
		t.Fatalf("metadata: %v", err)
	}
	if len(meta.Brokers) == 0 {
		t.Fatal("metadata names no brokers")
	}
	brokers := map[int32]bool{}
	for _, b := range meta.Brokers {
		brokers[b.NodeID] = true
		if b.Host == "" || b.Port <= 0 {
			t.Fatalf("broker without an address: %+v", b)
		}
	}
	detail, ok := meta.Topics[topic]
	if !ok || detail.Err != nil {
		t.Fatalf("topic %s: %+v", topic, detail)
	}
	if len(detail.Partitions) != 2 {
		t.Fatalf("%d partitions, want 2", len(detail.Partitions))
	}
	for _, p := range detail.Partitions {
		if p.Err != nil || !brokers[p.Leader] {
			t.Fatalf("partition %d: leader %d not among the brokers %v (err %v)", p.Partition, p.Leader, brokers, p.Err)
		}
	}
}

func TestTinymqKadmListOffsets(t *testing.T) {
	cl, adm, ctx := clients(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	topic := createTopic(t, adm, ctx, 1)
	before := time.Now().Add(-time.Second).UnixMilli()
	var records []*kgo.Record
	for i := range 5 {
		records = append(records, &kgo.Record{Topic: topic, Partition: 0, Value: []byte{byte('a' + i)}})
	}
	if err := cl.ProduceSync(ctx, records...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}

	start, err := adm.ListStartOffsets(ctx, topic)
	if err != nil || start.Error() != nil {
		t.Fatalf("start offsets: %v %v", err, start.Error())
	}
	end, err := adm.ListEndOffsets(ctx, topic)
	if err != nil || end.Error() != nil {
		t.Fatalf("end offsets: %v %v", err, end.Error())
	}
	if o, _ := start.Lookup(topic, 0); o.Offset != 0 {
		t.Fatalf("start offset %d, want 0", o.Offset)
	}
	if o, _ := end.Lookup(topic, 0); o.Offset != 5 {
		t.Fatalf("end offset %d, want 5", o.Offset)
	}
	after, err := adm.ListOffsetsAfterMilli(ctx, before, topic)
	if err != nil || after.Error() != nil {
		t.Fatalf("offsets after %d: %v %v", before, err, after.Error())
	}
	if o, _ := after.Lookup(topic, 0); o.Offset != 0 {
		t.Fatalf("first offset after a time before every record: %d, want 0", o.Offset)
	}
	future, err := adm.ListOffsetsAfterMilli(ctx, time.Now().Add(time.Hour).UnixMilli(), topic)
	if err != nil || future.Error() != nil {
		t.Fatalf("offsets after the future: %v %v", err, future.Error())
	}
	// Kafka answers -1 for "no record at or after that time"; kadm maps it to the end offset.
	if o, _ := future.Lookup(topic, 0); o.Offset != -1 && o.Offset != 5 {
		t.Fatalf("offset after the future: %d, want -1 or the end (5)", o.Offset)
	}
}

func TestTinymqKadmDescribeTopicConfigs(t *testing.T) {
	_, adm, ctx := clients(t)
	topic := topicName(t)
	created, err := adm.CreateTopics(ctx, 1, 1, map[string]*string{"retention.ms": kadm.StringPtr("7200000")}, topic)
	if err != nil || created.Error() != nil {
		t.Fatalf("create: %v %v", err, created.Error())
	}
	t.Cleanup(func() { adm.DeleteTopics(context.Background(), topic) })

	configs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatalf("describe: %v", err)
	}
	rc, err := configs.On(topic, nil)
	if err != nil || rc.Err != nil {
		t.Fatalf("configs of %s: %v %v", topic, err, rc.Err)
	}
	values := map[string]string{}
	for _, c := range rc.Configs {
		if c.Value != nil {
			values[c.Key] = *c.Value
		}
	}
	if values["retention.ms"] != "7200000" {
		t.Fatalf("retention.ms = %q, want the 7200000 it was created with; all: %v", values["retention.ms"], values)
	}
	if _, ok := values["cleanup.policy"]; !ok {
		t.Fatalf("no cleanup.policy among %v", values)
	}

	missing := topicName(t)
	unknown, err := adm.DescribeTopicConfigs(ctx, missing)
	if err == nil {
		if rc, _ := unknown.On(missing, nil); rc.Err == nil {
			t.Fatalf("describing an unknown topic's configs succeeded: %+v", unknown)
		}
	}
}

func TestTinymqKadmDescribeBrokerConfigs(t *testing.T) {
	_, adm, ctx := clients(t)
	meta, err := adm.BrokerMetadata(ctx)
	if err != nil || len(meta.Brokers) == 0 {
		t.Fatalf("broker metadata: %v %+v", err, meta)
	}
	configs, err := adm.DescribeBrokerConfigs(ctx, meta.Brokers[0].NodeID)
	if err != nil {
		t.Fatalf("describe broker %d: %v", meta.Brokers[0].NodeID, err)
	}
	if len(configs) != 1 || configs[0].Err != nil || len(configs[0].Configs) == 0 {
		t.Fatalf("broker configs: %+v", configs)
	}
}

func TestTinymqKadmCreatePartitions(t *testing.T) {
	_, adm, ctx := clients(t)
	topic := createTopic(t, adm, ctx, 1)
	resp, err := adm.CreatePartitions(ctx, 2, topic)
	if err != nil || resp.Error() != nil {
		t.Fatalf("create partitions: %v %v", err, resp.Error())
	}
	listed, err := adm.ListTopics(ctx, topic)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if n := len(listed[topic].Partitions); n != 3 {
		t.Fatalf("%d partitions after adding 2 to 1, want 3", n)
	}
}

// alterErr is the first error of an alter's responses.
func alterErr(rs kadm.AlterConfigsResponses) error {
	for _, r := range rs {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}

// configValues is the described configs of topic, by name.
func configValues(t *testing.T, adm *kadm.Client, ctx context.Context, topic string) map[string]string {
	t.Helper()
	configs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatalf("describe: %v", err)
	}
	rc, err := configs.On(topic, nil)
	if err != nil || rc.Err != nil {
		t.Fatalf("configs of %s: %v %v", topic, err, rc.Err)
	}
	values := map[string]string{}
	for _, c := range rc.Configs {
		if c.Value != nil {
			values[c.Key] = *c.Value
		}
	}
	return values
}

func TestTinymqKadmAlterTopicConfigs(t *testing.T) {
	_, adm, ctx := clients(t)
	topic := createTopic(t, adm, ctx, 1)
	set := []kadm.AlterConfig{
		{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("120000")},
		{Op: kadm.SetConfig, Name: "max.message.bytes", Value: kadm.StringPtr("65536")},
	}
	altered, err := adm.AlterTopicConfigs(ctx, set, topic)
	if err != nil || alterErr(altered) != nil {
		t.Fatalf("alter: %v %v", err, alterErr(altered))
	}
	values := configValues(t, adm, ctx, topic)
	if values["retention.ms"] != "120000" || values["max.message.bytes"] != "65536" {
		t.Fatalf("after the alter: %v", values)
	}
	removed, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.DeleteConfig, Name: "max.message.bytes"}}, topic)
	if err != nil || alterErr(removed) != nil {
		t.Fatalf("delete config: %v %v", err, alterErr(removed))
	}
	if values := configValues(t, adm, ctx, topic); values["max.message.bytes"] == "65536" || values["retention.ms"] != "120000" {
		t.Fatalf("after deleting max.message.bytes: %v", values)
	}
	compacted, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "cleanup.policy", Value: kadm.StringPtr("compact")}}, topic)
	if err != nil || alterErr(compacted) != nil {
		t.Fatalf("cleanup.policy=compact: %v %v", err, alterErr(compacted))
	}
	if values := configValues(t, adm, ctx, topic); values["cleanup.policy"] != "compact" {
		t.Fatalf("after cleanup.policy=compact: %v", values)
	}
	refused, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "cleanup.policy", Value: kadm.StringPtr("shred")}}, topic)
	if err == nil && alterErr(refused) == nil {
		t.Fatalf("cleanup.policy=shred was accepted: %+v", refused)
	}
	// The whole-config replacement (AlterConfigs): what is left out goes back to its default.
	replaced, err := adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: "retention.bytes", Value: kadm.StringPtr("1048576")}}, topic)
	if err != nil || alterErr(replaced) != nil {
		t.Fatalf("replace: %v %v", err, alterErr(replaced))
	}
	values = configValues(t, adm, ctx, topic)
	if values["retention.bytes"] != "1048576" || values["retention.ms"] == "120000" {
		t.Fatalf("after the replacement: %v", values)
	}
}

func TestTinymqKadmListMaxTimestampOffsets(t *testing.T) {
	cl, adm, ctx := clients(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	topic := createTopic(t, adm, ctx, 1)
	now := time.Now()
	// The largest timestamp is the second record's.
	var records []*kgo.Record
	for i, ago := range []time.Duration{4, 1, 2, 3} {
		records = append(records, &kgo.Record{Topic: topic, Partition: 0, Value: []byte{byte('a' + i)}, Timestamp: now.Add(-ago * time.Second)})
	}
	if err := cl.ProduceSync(ctx, records...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	listed, err := adm.ListMaxTimestampOffsets(ctx, topic)
	if err != nil || listed.Error() != nil {
		t.Fatalf("max timestamp offsets: %v %v", err, listed.Error())
	}
	if o, _ := listed.Lookup(topic, 0); o.Offset != 1 || o.Timestamp != now.Add(-time.Second).UnixMilli() {
		t.Fatalf("max timestamp offset %+v, want offset 1 at %d", o, now.Add(-time.Second).UnixMilli())
	}
}

func TestTinymqKadmDeleteRecords(t *testing.T) {
	cl, adm, ctx := clients(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	topic := createTopic(t, adm, ctx, 1)
	var records []*kgo.Record
	for i := range 10 {
		records = append(records, &kgo.Record{Topic: topic, Partition: 0, Value: []byte{byte('a' + i)}})
	}
	if err := cl.ProduceSync(ctx, records...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	var offsets kadm.Offsets
	offsets.AddOffset(topic, 0, 6, -1)
	deleted, err := adm.DeleteRecords(ctx, offsets)
	if err != nil || deleted.Error() != nil {
		t.Fatalf("delete records: %v %v", err, deleted.Error())
	}
	if d, _ := deleted.Lookup(topic, 0); d.LowWatermark != 6 {
		t.Fatalf("low watermark %d, want 6", d.LowWatermark)
	}
	start, err := adm.ListStartOffsets(ctx, topic)
	if err != nil || start.Error() != nil {
		t.Fatalf("start offsets: %v %v", err, start.Error())
	}
	if o, _ := start.Lookup(topic, 0); o.Offset != 6 {
		t.Fatalf("start offset %d after deleting below 6", o.Offset)
	}
	var past kadm.Offsets
	past.AddOffset(topic, 0, 11, -1)
	refused, err := adm.DeleteRecords(ctx, past)
	if err == nil && refused.Error() == nil {
		t.Fatalf("deleting past the high watermark succeeded: %+v", refused)
	}
	// A consumer from the start gets the records from 6 on.
	consumer, err := kgo.NewClient(kgo.SeedBrokers(seeds(t)...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	defer consumer.Close()
	var got []byte
	for len(got) < 4 && ctx.Err() == nil {
		consumer.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, r.Value...) })
	}
	if string(got) != "ghij" {
		t.Fatalf("consumed %q from the start, want \"ghij\"", got)
	}
}

func TestTinymqKadmDeleteOffsets(t *testing.T) {
	_, adm, ctx := clients(t)
	topic := createTopic(t, adm, ctx, 2)
	group := topicName(t)
	var offsets kadm.Offsets
	offsets.AddOffset(topic, 0, 0, -1)
	offsets.AddOffset(topic, 1, 0, -1)
	committed, err := adm.CommitOffsets(ctx, group, offsets)
	if err != nil || committed.Error() != nil {
		t.Fatalf("commit: %v %v", err, committed.Error())
	}
	var partition0 kadm.TopicsSet
	partition0.Add(topic, 0)
	deleted, err := adm.DeleteOffsets(ctx, group, partition0)
	if err != nil || deleted.Error() != nil {
		t.Fatalf("delete offsets: %v %v", err, deleted.Error())
	}
	fetched, err := adm.FetchOffsets(ctx, group)
	if err != nil || fetched.Error() != nil {
		t.Fatalf("fetch offsets: %v %v", err, fetched.Error())
	}
	if o, ok := fetched.Lookup(topic, 0); ok && o.At >= 0 {
		t.Fatalf("partition 0's offset is still %d", o.At)
	}
	if o, ok := fetched.Lookup(topic, 1); !ok || o.At != 0 {
		t.Fatalf("partition 1's offset: %+v %v, want 0", o, ok)
	}
}

func TestTinymqKadmACLs(t *testing.T) {
	_, adm, ctx := clients(t)
	topic := topicName(t)
	principal := "User:" + topic
	b := kadm.NewACLs().Allow(principal).Topics(topic).Operations(kadm.OpRead, kadm.OpDescribe).ResourcePatternType(kadm.ACLPatternLiteral)
	created, err := adm.CreateACLs(ctx, b)
	if err != nil {
		t.Fatalf("create ACLs: %v", err)
	}
	for _, c := range created {
		if c.Err != nil {
			t.Fatalf("create ACL %+v: %v %s", c, c.Err, c.ErrMessage)
		}
	}
	list := kadm.NewACLs().Allow(principal).AllowHosts().Topics(topic).Operations(kadm.OpAny).ResourcePatternType(kadm.ACLPatternMatch)
	described, err := adm.DescribeACLs(ctx, list)
	if err != nil {
		t.Fatalf("describe ACLs: %v", err)
	}
	seen := map[kadm.ACLOperation]bool{}
	for _, r := range described {
		if r.Err != nil {
			t.Fatalf("describe filter: %v %s", r.Err, r.ErrMessage)
		}
		for _, d := range r.Described {
			if d.Principal != principal || d.Name != topic || d.Host != "*" || d.Permission.String() != "ALLOW" {
				t.Fatalf("described %+v", d)
			}
			seen[d.Operation] = true
		}
	}
	if !seen[kadm.OpRead] || !seen[kadm.OpDescribe] || len(seen) != 2 {
		t.Fatalf("described operations %v, want READ and DESCRIBE", seen)
	}
	remove := kadm.NewACLs().Allow(principal).AllowHosts().Topics(topic).Operations(kadm.OpRead).ResourcePatternType(kadm.ACLPatternLiteral)
	deleted, err := adm.DeleteACLs(ctx, remove)
	if err != nil {
		t.Fatalf("delete ACLs: %v", err)
	}
	count := 0
	for _, r := range deleted {
		if r.Err != nil {
			t.Fatalf("delete filter: %v %s", r.Err, r.ErrMessage)
		}
		count += len(r.Deleted)
	}
	if count != 1 {
		t.Fatalf("deleted %d ACLs, want the READ one", count)
	}
	t.Cleanup(func() {
		adm.DeleteACLs(context.Background(), kadm.NewACLs().Allow(principal).AllowHosts().Topics(topic).Operations(kadm.OpAny).ResourcePatternType(kadm.ACLPatternAny))
	})
}
