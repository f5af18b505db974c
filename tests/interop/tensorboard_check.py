#!/usr/bin/env python3
"""tandem's TensorBoard event files read by Google's protobuf runtime
(CTest interop.tensorboard; exit 77, a skip, without python3-protobuf).

The tensorflow.Event and Summary messages are declared here at run time
from their field numbers (descriptor_pb2), not copied from TensorFlow. A
short `tandem train` writes the events; every record's length and data
CRC-32C must verify, every record must parse as an Event, the first must be
the file version, and each step's scalars must equal metrics.jsonl's.

    python3 tensorboard_check.py --tandem build/tandem --work /tmp/x
"""
import argparse
import glob
import json
import os
import shutil
import struct
import subprocess
import sys

try:
    from google.protobuf import descriptor_pb2, descriptor_pool
    try:
        from google.protobuf import message_factory
    except ImportError:
        message_factory = None
except ImportError:
    print("python3-protobuf is not installed: skipped")
    sys.exit(77)


def event_class():
    f = descriptor_pb2.FileDescriptorProto(name="tandem_event_check.proto",
                                           package="tensorflow", syntax="proto3")
    T = descriptor_pb2.FieldDescriptorProto
    value = f.message_type.add(name="Value")
    value.field.add(name="tag", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    value.field.add(name="simple_value", number=2, type=T.TYPE_FLOAT, label=T.LABEL_OPTIONAL)
    summary = f.message_type.add(name="Summary")
    summary.field.add(name="value", number=1, type=T.TYPE_MESSAGE, label=T.LABEL_REPEATED,
                      type_name=".tensorflow.Value")
    event = f.message_type.add(name="Event")
    event.field.add(name="wall_time", number=1, type=T.TYPE_DOUBLE, label=T.LABEL_OPTIONAL)
    event.field.add(name="step", number=2, type=T.TYPE_INT64, label=T.LABEL_OPTIONAL)
    event.field.add(name="file_version", number=3, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    event.field.add(name="summary", number=5, type=T.TYPE_MESSAGE, label=T.LABEL_OPTIONAL,
                    type_name=".tensorflow.Summary")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    descriptor = pool.FindMessageTypeByName("tensorflow.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    with open(path, "rb") as f:
        data = f.read()
    at = 0
    while at < len(data):
        header = data[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[at + 8:at + 12])
        assert length_crc == masked(crc32c(header)), f"length CRC of the record at byte {at}"
        body = data[at + 12:at + 12 + length]
        (body_crc,) = struct.unpack("<I", data[at + 12 + length:at + 16 + length])
        assert body_crc == masked(crc32c(body)), f"data CRC of the record at byte {at}"
        yield body
        at += 16 + length


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tandem", required=True)
    p.add_argument("--work", required=True)
    args = p.parse_args()
    run = os.path.join(args.work, "run")
    shutil.rmtree(run, ignore_errors=True)
    subprocess.run([args.tandem, "train", "--model", "mlp", "--epochs", "1", "--train-examples",
                    "512", "--test-examples", "128", "--threads", "1", "--quiet", "--output", run],
                   check=True)
    Event = event_class()
    files = glob.glob(os.path.join(run, "tensorboard", "events.out.tfevents.*"))
    assert len(files) == 1, files
    events = []
    for body in records(files[0]):
        e = Event()
        e.ParseFromString(body)
        events.append(e)
    assert events[0].file_version == "brain.Event:2", events[0]
    steps = {}
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            j = json.loads(line)
            if j["type"] == "step":
                steps[j["global_step"]] = j
    checked = 0
    for e in events[1:]:
        scalars = {v.tag: v.simple_value for v in e.summary.value}
        if "train/loss" not in scalars:
            continue
        line = steps[e.step]
        for tag, key in (("train/loss", "loss"), ("train/learning_rate", "learning_rate"),
                         ("train/examples_per_second", "examples_per_second")):
            expected = struct.unpack("<f", struct.pack("<f", line[key]))[0]
            assert scalars[tag] == expected, (e.step, tag, scalars[tag], expected)
        checked += 1
    assert checked == len(steps), (checked, len(steps))
    print(f"{len(events)} events, {checked} steps' scalars equal metrics.jsonl's, every CRC verified")
    return 0


if __name__ == "__main__":
    sys.exit(main())
