"""The test process splits its CPU into four logical devices before TensorFlow starts, so that
multi-device (ring) training runs here without GPUs; everything else uses /CPU:0 as before."""

from ngra_tf.parallel.ring import split_cpu

split_cpu(4)
