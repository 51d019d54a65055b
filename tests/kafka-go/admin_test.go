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
