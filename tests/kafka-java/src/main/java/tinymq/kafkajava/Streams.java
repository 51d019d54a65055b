package tinymq.kafkajava;

import java.util.Arrays;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.StateRestoreListener;

/**
 * Kafka Streams applications (org.apache.kafka:kafka-streams) with
 * processing.guarantee=exactly_once_v2, each running until it is killed and printing
 * {"streams": STATE} on each state change, and {"restored": STORE, "partition": P, "records": N}
 * when a store's partition has been restored from its changelog.
 *
 * <pre>
 * streams-eos       BOOTSTRAP IN OUT APPLICATION_ID STATE_DIR   copies every record of IN to
 *                                    OUT with its value prefixed by "s"
 * streams-wordcount BOOTSTRAP IN OUT APPLICATION_ID STATE_DIR   counts the words of IN's
 *                                    values: split into lower-case words, regrouped by word
 *                                    through the repartition topic APPLICATION_ID-words-repartition,
 *                                    counted in the store "counts" (changelog
 *                                    APPLICATION_ID-counts-changelog); each new count goes to
 *                                    OUT as key WORD, value the count in decimal
 * </pre>
 */
final class Streams {
    private Streams() {}

    static void eos(String bootstrap, String in, String out, String applicationId, String stateDir)
            throws InterruptedException {
        StreamsBuilder builder = new StreamsBuilder();
        builder.<String, String>stream(in).mapValues(v -> "s" + v).to(out);
        run(builder, config(bootstrap, applicationId, stateDir));
    }

    static void wordCount(
            String bootstrap, String in, String out, String applicationId, String stateDir)
            throws InterruptedException {
        StreamsBuilder builder = new StreamsBuilder();
        builder.<String, String>stream(in)
            .flatMapValues(v -> Arrays.asList(v.toLowerCase(Locale.ROOT).split("\\W+")))
            .filter((key, word) -> !word.isEmpty())
            .groupBy((key, word) -> word, Grouped.as("words"))
            .count(Materialized.as("counts"))
            .toStream()
            .mapValues(count -> Long.toString(count))
            .to(out, Produced.with(Serdes.String(), Serdes.String()));
        run(builder, config(bootstrap, applicationId, stateDir));
    }

    private static Properties config(String bootstrap, String applicationId, String stateDir) {
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, applicationId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "100");
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, "1");
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        // A killed instance's partitions move once its session ends: keep that short.
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), "6000");
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), "1000");
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        return props;
    }

    private static void run(StreamsBuilder builder, Properties props) throws InterruptedException {
        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch failed = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            System.out.println("{\"streams\":" + Main.json(now.toString()) + "}");
            System.out.flush();
            if (now == KafkaStreams.State.ERROR) {
                failed.countDown();
            }
        });
        streams.setGlobalStateRestoreListener(new StateRestoreListener() {
            @Override
            public void onRestoreStart(TopicPartition partition, String store, long start, long end) {}

            @Override
            public void onBatchRestored(TopicPartition partition, String store, long end, long count) {}

            @Override
            public void onRestoreEnd(TopicPartition partition, String store, long total) {
                System.out.println("{\"restored\":" + Main.json(store) + ",\"partition\":"
                    + partition.partition() + ",\"records\":" + total + "}");
                System.out.flush();
            }
        });
        streams.start();
        failed.await();
        throw new IllegalStateException("the Streams application failed");
    }
}
