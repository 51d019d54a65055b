package tinymq.kafkajava;

import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;

/**
 * A Kafka Streams application (org.apache.kafka:kafka-streams) with
 * processing.guarantee=exactly_once_v2: it copies every record of IN to OUT with its value
 * prefixed by "s", until it is killed. Prints {"streams": STATE} on each state change.
 *
 * <pre>
 * streams-eos BOOTSTRAP IN OUT APPLICATION_ID STATE_DIR
 * </pre>
 */
final class Streams {
    private Streams() {}

    static void eos(String bootstrap, String in, String out, String applicationId, String stateDir)
            throws InterruptedException {
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
        StreamsBuilder builder = new StreamsBuilder();
        builder.<String, String>stream(in).mapValues(v -> "s" + v).to(out);
        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch failed = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            System.out.println("{\"streams\":" + Main.json(now.toString()) + "}");
            System.out.flush();
            if (now == KafkaStreams.State.ERROR) {
                failed.countDown();
            }
        });
        streams.start();
        failed.await();
        throw new IllegalStateException("the Streams application failed");
    }
}
