package tinymq.kafkajava;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.Future;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The Java Kafka client (org.apache.kafka:kafka-clients) driven by tinymq's process tests
 * (crates/cli/tests/kafka_clients_java.rs). Prints one JSON object per line on stdout; exits
 * non-zero with a {"error": ...} line when something fails or nothing arrives for a while.
 *
 * <pre>
 * produce       BOOTSTRAP TOPIC COUNT        keys k0.., values v0.., header n=i; acks=all,
 *                                            idempotent; a line per acknowledged record
 * consume       BOOTSTRAP TOPIC COUNT        every partition from the beginning, no group
 * consume-group BOOTSTRAP TOPIC GROUP COUNT  as a group member; commits what it read
 * roundtrip     BOOTSTRAP TOPIC GROUP COUNT  produce, then consume-group, and check each
 *                                            acknowledged record arrived exactly once
 * check-sequence BOOTSTRAP TOPIC GROUP COUNT read COUNT records whose values are 0..COUNT-1
 *                                            as a group member: none lost or repeated, and per
 *                                            partition offsets without a gap, values rising
 * perf-produce  BOOTSTRAP TOPIC COUNT BYTES  throughput: COUNT values of BYTES bytes, no key,
 *                                            acks=all, linger.ms=5, batch.size=1 MiB, no
 *                                            compression (tinymq bench's defaults); one JSON
 *                                            line in tinymq bench's report form
 * perf-consume  BOOTSTRAP TOPIC COUNT BYTES [ISOLATION]  throughput: COUNT records from every
 *                                            partition's beginning, no group, the client's fetch
 *                                            defaults; ISOLATION read_uncommitted (default) or
 *                                            read_committed
 * perf-txn-produce BOOTSTRAP TOPIC COUNT BYTES RECORDS_PER_TXN  perf-produce's settings inside
 *                                            transactions of RECORDS_PER_TXN records (one
 *                                            transactional.id, begin/send/commit); latency per
 *                                            transaction, record_latency per record (send to
 *                                            its commit's return)
 * create-topic  BOOTSTRAP TOPIC PARTITIONS   through the Admin client, replication factor 1
 * txn-ctp       BOOTSTRAP IN OUT GROUP TXID COUNT  consume-transform-produce in transactions
 *                                            (see {@link Txn})
 * streams-eos   BOOTSTRAP IN OUT APP STATE   a Kafka Streams exactly_once_v2 copy, until killed
 *                                            (see {@link Streams})
 * streams-wordcount BOOTSTRAP IN OUT APP STATE  a Kafka Streams exactly_once_v2 word count
 *                                            (repartition, state store), until killed
 * </pre>
 */
public final class Main {
    /** Give up when a consumer sees nothing new for this long: the test fails, not hangs. */
    private static final Duration IDLE_LIMIT = Duration.ofSeconds(60);

    public static void main(String[] args) throws Exception {
        try {
            run(args);
        } catch (Exception e) {
            System.out.println("{\"error\":" + json(e.toString()) + "}");
            System.out.flush();
            System.exit(1);
        }
    }

    private static void run(String[] args) throws Exception {
        String mode = args.length > 0 ? args[0] : "";
        switch (mode) {
            case "produce" -> {
                need(args, 4);
                List<String> produced = produce(args[1], args[2], Integer.parseInt(args[3]));
                System.out.println("{\"done\":\"produce\",\"count\":" + produced.size() + "}");
            }
            case "consume" -> {
                need(args, 4);
                List<String> got = consume(args[1], args[2], null, Integer.parseInt(args[3]));
                System.out.println("{\"done\":\"consume\",\"count\":" + got.size() + "}");
            }
            case "consume-group" -> {
                need(args, 5);
                List<String> got = consume(args[1], args[2], args[3], Integer.parseInt(args[4]));
                System.out.println("{\"done\":\"consume-group\",\"count\":" + got.size() + "}");
            }
            case "roundtrip" -> {
                need(args, 5);
                roundtrip(args[1], args[2], args[3], Integer.parseInt(args[4]));
            }
            case "check-sequence" -> {
                need(args, 5);
                checkSequence(args[1], args[2], args[3], Integer.parseInt(args[4]));
            }
            case "perf-produce" -> {
                need(args, 5);
                Perf.produce(args[1], args[2], Integer.parseInt(args[3]), Integer.parseInt(args[4]));
            }
            case "perf-consume" -> {
                if (args.length != 6) {
                    need(args, 5);
                }
                Perf.consume(args[1], args[2], Integer.parseInt(args[3]), Integer.parseInt(args[4]),
                    args.length == 6 ? args[5] : "read_uncommitted");
            }
            case "perf-txn-produce" -> {
                need(args, 6);
                Perf.txnProduce(args[1], args[2], Integer.parseInt(args[3]),
                    Integer.parseInt(args[4]), Integer.parseInt(args[5]));
            }
            case "create-topic" -> {
                need(args, 4);
                Perf.createTopic(args[1], args[2], Integer.parseInt(args[3]));
            }
            case "streams-eos" -> {
                need(args, 6);
                Streams.eos(args[1], args[2], args[3], args[4], args[5]);
            }
            case "streams-wordcount" -> {
                need(args, 6);
                Streams.wordCount(args[1], args[2], args[3], args[4], args[5]);
            }
            case "txn-ctp" -> {
                need(args, 7);
                Txn.consumeTransformProduce(
                    args[1], args[2], args[3], args[4], args[5], Integer.parseInt(args[6]));
            }
            default -> throw new IllegalArgumentException(
                "usage: produce|consume|consume-group|roundtrip BOOTSTRAP TOPIC [GROUP] COUNT");
        }
    }

    private static void need(String[] args, int count) {
        if (args.length != count) {
            throw new IllegalArgumentException(args[0] + " takes " + (count - 1) + " arguments");
        }
    }

    /** Produces COUNT records and returns "partition/offset/key" of each acknowledgement. */
    private static List<String> produce(String bootstrap, String topic, int count)
            throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            for (int i = 0; i < count; i++) {
                ProducerRecord<String, String> record =
                    new ProducerRecord<>(topic, "k" + i, "v" + i);
                record.headers().add("n", Integer.toString(i).getBytes(StandardCharsets.UTF_8));
                sent.add(producer.send(record));
            }
            producer.flush();
            List<String> acknowledged = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                RecordMetadata meta = sent.get(i).get();
                acknowledged.add(meta.partition() + "/" + meta.offset() + "/k" + i);
                System.out.println("{\"produced\":" + json("k" + i) + ",\"partition\":"
                    + meta.partition() + ",\"offset\":" + meta.offset() + "}");
            }
            return acknowledged;
        }
    }

    /**
     * Reads COUNT records, as a member of GROUP (committing them) or, when GROUP is null,
     * from every partition's beginning; prints each and returns "partition/offset/key".
     */
    private static List<String> consume(String bootstrap, String topic, String group, int count) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        if (group != null) {
            props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        }
        List<String> got = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            if (group != null) {
                consumer.subscribe(List.of(topic));
            } else {
                List<TopicPartition> partitions = new ArrayList<>();
                for (PartitionInfo info : consumer.partitionsFor(topic)) {
                    partitions.add(new TopicPartition(topic, info.partition()));
                }
                consumer.assign(partitions);
                consumer.seekToBeginning(partitions);
            }
            long idleSince = System.nanoTime();
            while (got.size() < count) {
                int before = got.size();
                for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(200))) {
                    System.out.println(recordJson(record));
                    got.add(record.partition() + "/" + record.offset() + "/" + text(record.key()));
                }
                if (got.size() > before) {
                    idleSince = System.nanoTime();
                } else if (System.nanoTime() - idleSince > IDLE_LIMIT.toNanos()) {
                    throw new IllegalStateException("nothing new for " + IDLE_LIMIT + " after "
                        + got.size() + " of " + count + " records");
                }
            }
            if (group != null) {
                consumer.commitSync();
                System.out.println("{\"committed\":" + json(group) + ",\"assignment\":"
                    + json(consumer.assignment().toString()) + "}");
            }
        }
        return got;
    }

    /** Produce, then consume as a group: every acknowledged record once, none other. */
    private static void roundtrip(String bootstrap, String topic, String group, int count)
            throws Exception {
        List<String> produced = produce(bootstrap, topic, count);
        List<String> consumed = consume(bootstrap, topic, group, count);
        Set<String> unique = new HashSet<>(consumed);
        if (unique.size() != consumed.size() || !unique.equals(new HashSet<>(produced))) {
            throw new IllegalStateException("consumed " + consumed.size() + " ("
                + unique.size() + " distinct) records that differ from the "
                + produced.size() + " acknowledged");
        }
        System.out.println("{\"done\":\"roundtrip\",\"produced\":" + produced.size()
            + ",\"consumed\":" + consumed.size() + "}");
    }

    /** Reads values 0..COUNT-1 as GROUP, checking loss, duplicates and per-partition order. */
    private static void checkSequence(String bootstrap, String topic, String group, int count) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        BitSet seen = new BitSet(count);
        Map<Integer, long[]> lastByPartition = new TreeMap<>(); // {offset, value, records}
        int read = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            long idleSince = System.nanoTime();
            while (read < count) {
                int before = read;
                for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(200))) {
                    int value = Integer.parseInt(text(record.value()));
                    long[] last = lastByPartition.computeIfAbsent(
                        record.partition(), p -> new long[] {-1, -1, 0});
                    if (record.offset() != last[0] + 1 || value <= last[1]) {
                        throw new IllegalStateException("partition " + record.partition()
                            + ": offset " + record.offset() + " value " + value + " after offset "
                            + last[0] + " value " + last[1]);
                    }
                    if (value < 0 || value >= count || seen.get(value)) {
                        throw new IllegalStateException("value " + value + " unexpected or repeated");
                    }
                    seen.set(value);
                    last[0] = record.offset();
                    last[1] = value;
                    last[2]++;
                    read++;
                }
                if (read > before) {
                    idleSince = System.nanoTime();
                } else if (System.nanoTime() - idleSince > IDLE_LIMIT.toNanos()) {
                    throw new IllegalStateException("nothing new for " + IDLE_LIMIT + " after "
                        + read + " of " + count + " records");
                }
            }
            consumer.commitSync();
        }
        StringBuilder partitions = new StringBuilder("{");
        lastByPartition.forEach((partition, last) -> partitions
            .append(partitions.length() > 1 ? "," : "")
            .append(json(partition.toString())).append(':').append(last[2]));
        System.out.println("{\"done\":\"check-sequence\",\"count\":" + read
            + ",\"distinct\":" + seen.cardinality() + ",\"partitions\":" + partitions + "}}");
    }

    private static String recordJson(ConsumerRecord<byte[], byte[]> record) {
        StringBuilder list = new StringBuilder("[");
        for (Header header : record.headers()) {
            if (list.length() > 1) {
                list.append(',');
            }
            list.append("[").append(json(header.key())).append(',')
                .append(header.value() == null ? "null" : json(text(header.value()))).append("]");
        }
        list.append("]");
        return "{\"partition\":" + record.partition() + ",\"offset\":" + record.offset()
            + ",\"timestamp\":" + record.timestamp()
            + ",\"key\":" + (record.key() == null ? "null" : json(text(record.key())))
            + ",\"value\":" + (record.value() == null ? "null" : json(text(record.value())))
            + ",\"headers\":" + list + "}";
    }

    private static String text(byte[] bytes) {
        return bytes == null ? "null" : new String(bytes, StandardCharsets.UTF_8);
    }

    /** A JSON string literal. */
    static String json(String s) {
        StringBuilder out = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                default -> {
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        return out.append('"').toString();
    }
}
