"""One worker of a TensorFlow cluster that ngra_tf trains over (examples/train.py --cluster).

Run one per machine, each with the same --cluster list and its own --task:

    python examples/worker.py --cluster=host0:2222,host1:2222 --task=0

It serves until stopped (Ctrl-C). It loads ngra_tf's op library, so the
ring's copies and propagation kernels can run here.

A worker runs whatever graph ops a client sends it, with no authentication
(TensorFlow's servers have none). It listens only on its own address in
--cluster (host0 above; 127.0.0.1 for localhost), never on the machine's
other interfaces, unless --listen says otherwise. Run clusters inside a
private network, or reach workers through SSH tunnels (docs/guide/devices.md, Security).
"""

import sys

from absl import app, flags

from ngra_tf import parallel

flags.DEFINE_list("cluster", None, "Every worker's host:port, in task order (the same list on every worker).")
flags.DEFINE_integer("task", None, "This worker's index in --cluster.", lower_bound=0)
flags.DEFINE_string("listen", None, "Where to listen: a name or address of this machine (default: this task's "
                    "host in --cluster), or '*' for every interface, only on a network whose every host you "
                    "trust (anyone who reaches the port can run code here).")
flags.mark_flags_as_required(["cluster", "task"])
FLAGS = flags.FLAGS


def main(argv):
    del argv
    try:
        server = parallel.serve(FLAGS.cluster, FLAGS.task, listen=FLAGS.listen)
    except ValueError as error:
        raise app.UsageError(str(error)) from None
    except RuntimeError as error:
        sys.exit(f"worker.py: {error}")
    print(f"worker {FLAGS.task} of {len(FLAGS.cluster)} serving at {server.target}", flush=True)
    server.join()


if __name__ == "__main__":
    app.run(main)
