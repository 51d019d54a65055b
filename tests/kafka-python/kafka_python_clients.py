"""kafka-python (pure Python) driven by crates/cli/tests/kafka_clients_python.rs against
tinymq's Kafka listener.

    kafka_python_clients.py roundtrip BOOTSTRAP TOPIC GROUP COUNT

Produces COUNT records with keys and headers (acks=all), reads them back as a member of GROUP
(each acknowledged record exactly once, with its key, value and header), commits, leaves;
then produces two more and checks that a new member of GROUP gets exactly those. Prints a
JSON summary; on failure prints {"error": ...} and exits 1. Every wait is bounded.
"""

import json
import sys
import time

from kafka import KafkaConsumer, KafkaProducer

WAIT_S = 60


class Failed(Exception):
    pass


def produce(bootstrap, topic, records):
    """Sends (key, value) pairs with a header each; returns (partition, offset) of each."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    futures = [producer.send(topic, key=k.encode(), value=v.encode(),
                             headers=[("from", b"kafka-python")])
               for k, v in records]
    producer.flush(timeout=WAIT_S)
    acks = [(m.partition, m.offset) for m in (f.get(timeout=WAIT_S) for f in futures)]
    producer.close(timeout=WAIT_S)
    return acks


def read_as_member(bootstrap, topic, group, count):
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    got = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < count:
        if time.monotonic() > deadline:
            raise Failed(f"read {len(got)} of {count} as a member of {group}")
        for records in consumer.poll(timeout_ms=200).values():
            got.extend(records)
    consumer.commit()
    consumer.close()
    return got


def roundtrip(bootstrap, topic, group, count):
    count = int(count)
    records = [(f"k{i}", f"v{i}") for i in range(count)]
    acks = produce(bootstrap, topic, records)
    got = read_as_member(bootstrap, topic, group, count)
    sent = {ack: record for ack, record in zip(acks, records)}
    read = {(r.partition, r.offset): (r.key.decode(), r.value.decode()) for r in got}
    if len(got) != count or read != sent:
        raise Failed(f"sent {len(sent)} records, read {len(got)} ({len(read)} distinct) "
                     f"that differ: {sorted(set(read.items()) ^ set(sent.items()))[:4]}")
    headers = {tuple(r.headers) for r in got}
    if headers != {(("from", b"kafka-python"),)}:
        raise Failed(f"headers read: {headers}")

    late = produce(bootstrap, topic, [("late1", "x"), ("late2", "y")])
    resumed = read_as_member(bootstrap, topic, group, 2)
    if sorted((r.partition, r.offset) for r in resumed) != sorted(late):
        raise Failed(f"after the commit the group read {resumed}, not the 2 new records {late}")
    print(json.dumps({"produced": count, "consumed": len(got), "resumed": len(resumed),
                      "partitions": sorted({p for p, _ in acks})}), flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 6 or sys.argv[1] != "roundtrip":
        sys.exit(f"usage: {sys.argv[0]} roundtrip BOOTSTRAP TOPIC GROUP COUNT")
    try:
        roundtrip(*sys.argv[2:])
    except Exception as e:  # noqa: BLE001 - any failure is reported as the run's result
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
        sys.exit(1)
