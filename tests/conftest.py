"""The test process splits its CPU into four logical devices before TensorFlow starts, so that
multi-device (ring) training runs here without GPUs; everything else uses /CPU:0 as before."""

import tensorflow as tf

from ngra_tf.parallel.ring import split_cpu

split_cpu(4)
# The ring tests count on exactly these devices; fail at collection, not later, if TF started first.
assert len(tf.config.list_logical_devices("CPU")) == 4, tf.config.list_logical_devices("CPU")
