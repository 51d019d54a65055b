package tinymq.kafkajava;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Throughput through the Kafka listener with the Java client, for scripts/bench-kafka.sh
 * beside `tinymq bench` on the native protocol. Prints one JSON line with tinymq bench's
 * report fields (mode, topic, messages, message_bytes, elapsed_s, msg_per_s, mb_per_s with MB
 * = 10^6 bytes of values, and for produce the send-to-acknowledgement latency in µs).
 */
final class Perf {
    /** Give up when nothing new arrives for this long: the run fails, not hangs. */
    private static final Duration IDLE_LIMIT = Duration.ofSeconds(60);

    private Perf() {}

    /**
     * tinymq bench's producer defaults: acks=all, linger 5 ms, 1 MiB batches, no compression;
     * idempotent (the client's default with acks=all, named so it is plain).
     */
    private static Properties producerProps(String bootstrap) {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        props.put(ProducerConfig.BATCH_SIZE_CONFIG, Integer.toString(1 << 20));
        props.put(ProducerConfig.MAX_REQUEST_SIZE_CONFIG, Integer.toString(4 << 20));
        props.put(ProducerConfig.BUFFER_MEMORY_CONFIG, Long.toString(256L << 20));
        props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, "none");
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        return props;
    }

    static void produce(String bootstrap, String topic, int count, int bytes) throws Exception {
        Properties props = producerProps(bootstrap);
        byte[] value = new byte[bytes];
        Arrays.fill(value, (byte) 'x');
        long[] latencyNs = new long[count];
        AtomicReference<Exception> failed = new AtomicReference<>();
        long started;
        long elapsedNs;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            producer.partitionsFor(topic); // metadata before the clock starts
            started = System.nanoTime();
            for (int i = 0; i < count; i++) {
                final int index = i;
                final long sentNs = System.nanoTime();
                producer.send(new ProducerRecord<>(topic, null, value), (meta, error) -> {
                    latencyNs[index] = System.nanoTime() - sentNs;
                    if (error != null) {
                        failed.compareAndSet(null, error);
                    }
                });
            }
            producer.flush();
            elapsedNs = System.nanoTime() - started;
        }
        if (failed.get() != null) {
            throw failed.get();
        }
        System.out.println(report("produce", topic, count, bytes, elapsedNs, percentiles(latencyNs)));
    }

    /**
     * Transactional produce: one producer with its own transactional.id, initTransactions
     * before the clock starts, then begin / RECORDS_PER_TXN sends / commit until COUNT records
     * are committed; the producer settings of {@link #produce} (acks=all, linger 5 ms, 1 MiB
     * batches). `latency` is per transaction (begin to the commit's return), `record_latency`
     * per record (send to the commit's return of its transaction).
     */
    static void txnProduce(String bootstrap, String topic, int count, int bytes, int perTxn)
            throws Exception {
        if (perTxn < 1) {
            throw new IllegalArgumentException("RECORDS_PER_TXN must be at least 1");
        }
        Properties props = producerProps(bootstrap);
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "perf-txn-" + java.util.UUID.randomUUID());
        byte[] value = new byte[bytes];
        Arrays.fill(value, (byte) 'x');
        int transactions = (count + perTxn - 1) / perTxn;
        long[] txnNs = new long[transactions];
        long[] recordNs = new long[count];
        long[] sentNs = new long[perTxn];
        AtomicReference<Exception> failed = new AtomicReference<>();
        long started;
        long elapsedNs;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            producer.partitionsFor(topic); // metadata before the clock starts
            producer.initTransactions();
            started = System.nanoTime();
            int sent = 0;
            for (int t = 0; t < transactions; t++) {
                long begun = System.nanoTime();
                producer.beginTransaction();
                int n = Math.min(perTxn, count - sent);
                for (int i = 0; i < n; i++) {
                    sentNs[i] = System.nanoTime();
                    producer.send(new ProducerRecord<>(topic, null, value), (meta, error) -> {
                        if (error != null) {
                            failed.compareAndSet(null, error);
                        }
                    });
                }
                producer.commitTransaction();
                long committed = System.nanoTime();
                if (failed.get() != null) {
                    throw failed.get();
                }
                txnNs[t] = committed - begun;
                for (int i = 0; i < n; i++) {
                    recordNs[sent + i] = committed - sentNs[i];
                }
                sent += n;
            }
            elapsedNs = System.nanoTime() - started;
        }
        String extra = ",\"records_per_txn\":" + perTxn + ",\"transactions\":" + transactions
            + ",\"txn_per_s\":" + transactions / (elapsedNs / 1e9)
            + ",\"latency_per\":\"transaction\",\"record_latency\":" + percentiles(recordNs);
        System.out.println(report("produce", topic, count, bytes, elapsedNs, percentiles(txnNs))
            .replaceFirst("}$", extra + "}"));
    }

    static void consume(String bootstrap, String topic, int count, int bytes, String isolation) {
        if (!isolation.equals("read_committed") && !isolation.equals("read_uncommitted")) {
            throw new IllegalArgumentException("isolation: read_committed or read_uncommitted");
        }
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        long read = 0;
        long started;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            List<TopicPartition> partitions = new ArrayList<>();
            for (PartitionInfo info : consumer.partitionsFor(topic)) {
                partitions.add(new TopicPartition(topic, info.partition()));
            }
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            started = System.nanoTime();
            long idleSince = started;
            while (read < count) {
                long before = read;
                for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(200))) {
                    if (record.value() == null || record.value().length != bytes) {
                        throw new IllegalStateException("a record of another size at "
                            + record.partition() + "/" + record.offset());
                    }
                    read++;
                }
                if (read > before) {
                    idleSince = System.nanoTime();
                } else if (System.nanoTime() - idleSince > IDLE_LIMIT.toNanos()) {
                    throw new IllegalStateException("nothing new for " + IDLE_LIMIT + " after "
                        + read + " of " + count + " records");
                }
            }
        }
        long elapsedNs = System.nanoTime() - started;
        System.out.println(report("consume", topic, read, bytes, elapsedNs, null)
            .replaceFirst("}$", ",\"isolation\":\"" + isolation + "\"}"));
    }

    /** {"p50_us", "p99_us", "p999_us", "max_us"} of durations in ns (sorts them). */
    private static String percentiles(long[] ns) {
        Arrays.sort(ns);
        return "{\"p50_us\":" + percentileUs(ns, 0.50)
            + ",\"p99_us\":" + percentileUs(ns, 0.99)
            + ",\"p999_us\":" + percentileUs(ns, 0.999)
            + ",\"max_us\":" + ns[ns.length - 1] / 1000 + "}";
    }

    /** Creates TOPIC with PARTITIONS partitions at replication factor 1. */
    static void createTopic(String bootstrap, String topic, int partitions) throws Exception {
        Properties props = new Properties();
        props.put(org.apache.kafka.clients.admin.AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (org.apache.kafka.clients.admin.Admin admin = org.apache.kafka.clients.admin.Admin.create(props)) {
            admin.createTopics(List.of(new org.apache.kafka.clients.admin.NewTopic(topic, partitions, (short) 1)))
                .all().get();
        }
        System.out.println("{\"done\":\"create-topic\",\"topic\":" + Main.json(topic) + "}");
    }

    private static long percentileUs(long[] sortedNs, double quantile) {
        int index = (int) Math.min(sortedNs.length - 1, Math.ceil(quantile * sortedNs.length) - 1);
        return sortedNs[Math.max(0, index)] / 1000;
    }

    private static String report(
            String mode, String topic, long messages, int bytes, long elapsedNs, String latency) {
        double seconds = elapsedNs / 1e9;
        return "{\"mode\":\"" + mode + "\",\"client\":\"java\",\"topic\":" + Main.json(topic)
            + ",\"messages\":" + messages + ",\"message_bytes\":" + bytes
            + ",\"elapsed_s\":" + seconds
            + ",\"msg_per_s\":" + messages / seconds
            + ",\"mb_per_s\":" + messages * (double) bytes / seconds / 1e6
            + (latency == null ? "" : ",\"latency\":" + latency) + "}";
    }
}
