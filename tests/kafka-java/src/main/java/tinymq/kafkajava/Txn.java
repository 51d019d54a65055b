package tinymq.kafkajava;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Consume-transform-produce with the Java client's transactions (initTransactions,
 * sendOffsetsToTransaction with the consumer's group metadata, commit and abort), then a
 * check of the output under both isolation levels.
 *
 * <pre>
 * txn-ctp BOOTSTRAP IN OUT GROUP TXID COUNT
 *   writes values 0..COUNT-1 to IN (idempotent), then copies each as "t<value>" to OUT in
 *   transactions of up to 10 records (max.poll.records), committing the consumed offsets in the transaction;
 *   every third transaction also writes "ABORTED" records and is aborted (the consumer then
 *   rewinds to the group's committed offsets and does it again). Last, a read_committed
 *   reader must see each "t<value>" exactly once and no "ABORTED", a read_uncommitted one
 *   must see the aborted records too, and the group's committed offsets must be IN's ends.
 * </pre>
 */
final class Txn {
    private static final Duration IDLE_LIMIT = Duration.ofSeconds(60);

    private Txn() {}

    static void consumeTransformProduce(
            String bootstrap, String in, String out, String group, String txid, int count)
            throws Exception {
        writeInput(bootstrap, in, count);
        int transactions = 0;
        int aborted = 0;
        int copied = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(bootstrap, group, "read_committed");
                KafkaProducer<String, String> producer = transactional(bootstrap, txid)) {
            producer.initTransactions();
            consumer.subscribe(List.of(in));
            long idleSince = System.nanoTime();
            while (copied < count) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                if (records.isEmpty()) {
                    if (System.nanoTime() - idleSince > IDLE_LIMIT.toNanos()) {
                        throw new IllegalStateException("nothing new for " + IDLE_LIMIT
                            + " after " + copied + " of " + count);
                    }
                    continue;
                }
                idleSince = System.nanoTime();
                producer.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                int inThis = 0;
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    String value = new String(r.value(), StandardCharsets.UTF_8);
                    producer.send(new ProducerRecord<>(out, value, "t" + value));
                    offsets.put(new TopicPartition(r.topic(), r.partition()),
                        new OffsetAndMetadata(r.offset() + 1));
                    inThis++;
                }
                producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                transactions++;
                if (transactions % 3 == 0) {
                    producer.send(new ProducerRecord<>(out, "x", "ABORTED"));
                    // Written first: an abort drops what is not sent yet.
                    producer.flush();
                    producer.abortTransaction();
                    aborted++;
                    rewind(consumer);
                } else {
                    producer.commitTransaction();
                    copied += inThis;
                }
            }
        }
        System.out.println("{\"transactions\":" + transactions + ",\"aborted\":" + aborted
            + ",\"copied\":" + copied + "}");
        check(bootstrap, out, group, in, count);
    }

    private static void writeInput(String bootstrap, String topic, int count) throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            for (int i = 0; i < count; i++) {
                producer.send(new ProducerRecord<>(topic, Integer.toString(i), Integer.toString(i)));
            }
            producer.flush();
        }
    }

    private static KafkaProducer<String, String> transactional(String bootstrap, String txid) {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txid);
        props.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "30000");
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        return new KafkaProducer<>(props);
    }

    private static KafkaConsumer<byte[], byte[]> consumer(
            String bootstrap, String group, String isolation) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        if (group != null) {
            props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        }
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "10");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        return new KafkaConsumer<>(props);
    }

    /** Back to the group's committed offsets (the aborted transaction's input is read again). */
    private static void rewind(KafkaConsumer<byte[], byte[]> consumer) {
        var committed = consumer.committed(consumer.assignment());
        for (TopicPartition tp : consumer.assignment()) {
            OffsetAndMetadata at = committed.get(tp);
            if (at == null) {
                consumer.seekToBeginning(List.of(tp));
            } else {
                consumer.seek(tp, at.offset());
            }
        }
    }

    private static List<String> readAll(String bootstrap, String topic, String isolation) {
        List<String> values = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(bootstrap, null, isolation)) {
            List<TopicPartition> partitions = new ArrayList<>();
            for (PartitionInfo info : consumer.partitionsFor(topic)) {
                partitions.add(new TopicPartition(topic, info.partition()));
            }
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            Map<TopicPartition, Long> ends = consumer.endOffsets(partitions);
            long idleSince = System.nanoTime();
            while (partitions.stream().anyMatch(tp -> consumer.position(tp) < ends.get(tp))) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    values.add(new String(r.value(), StandardCharsets.UTF_8));
                }
                if (!records.isEmpty()) {
                    idleSince = System.nanoTime();
                } else if (System.nanoTime() - idleSince > IDLE_LIMIT.toNanos()) {
                    throw new IllegalStateException("reading " + topic + " (" + isolation
                        + ") stalled after " + values.size() + " records");
                }
            }
        }
        return values;
    }

    private static void check(String bootstrap, String out, String group, String in, int count) {
        List<String> committed = readAll(bootstrap, out, "read_committed");
        Map<String, Integer> seen = new HashMap<>();
        for (String v : committed) {
            seen.merge(v, 1, Integer::sum);
        }
        for (int i = 0; i < count; i++) {
            Integer n = seen.get("t" + i);
            if (n == null || n != 1) {
                throw new IllegalStateException("read_committed saw t" + i + " " + n + " times");
            }
        }
        if (seen.containsKey("ABORTED") || committed.size() != count) {
            throw new IllegalStateException("read_committed saw " + committed.size()
                + " records, aborted ones included: " + seen.containsKey("ABORTED"));
        }
        List<String> everything = readAll(bootstrap, out, "read_uncommitted");
        long abortedSeen = everything.stream().filter("ABORTED"::equals).count();
        long groupTotal = 0;
        try (KafkaConsumer<byte[], byte[]> c = consumer(bootstrap, group, "read_committed")) {
            List<TopicPartition> partitions = new ArrayList<>();
            for (PartitionInfo info : c.partitionsFor(in)) {
                partitions.add(new TopicPartition(in, info.partition()));
            }
            Map<TopicPartition, Long> ends = c.endOffsets(partitions);
            for (var e : c.committed(new java.util.HashSet<>(partitions)).entrySet()) {
                long at = e.getValue() == null ? -1 : e.getValue().offset();
                if (at != ends.get(e.getKey())) {
                    throw new IllegalStateException(group + " committed " + at + " on "
                        + e.getKey() + ", whose end is " + ends.get(e.getKey()));
                }
                groupTotal += at;
            }
        }
        System.out.println("{\"done\":\"txn-ctp\",\"read_committed\":" + committed.size()
            + ",\"read_uncommitted\":" + everything.size() + ",\"aborted_seen_uncommitted\":"
            + abortedSeen + ",\"group_committed\":" + groupTotal + "}");
    }
}
