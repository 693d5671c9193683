"""One worker of a TensorFlow cluster that ngra_tf trains over (examples/train.py --cluster).

Run one per machine, each with the same --cluster list and its own --task:

    python examples/worker.py --cluster=host0:2222,host1:2222 --task=0

It serves until stopped (Ctrl-C). It loads ngra_tf's op library, so the
ring's copies and propagation kernels can run here.
"""

from absl import app, flags

from ngra_tf import parallel

flags.DEFINE_list("cluster", None, "Every worker's host:port, in task order (the same list on every worker).")
flags.DEFINE_integer("task", None, "This worker's index in --cluster.", lower_bound=0)
flags.mark_flags_as_required(["cluster", "task"])
FLAGS = flags.FLAGS


def main(argv):
    del argv
    try:
        server = parallel.serve(FLAGS.cluster, FLAGS.task)
    except ValueError as error:
        raise app.UsageError(str(error)) from None
    print(f"worker {FLAGS.task} of {len(FLAGS.cluster)} serving at {server.target}", flush=True)
    server.join()


if __name__ == "__main__":
    app.run(main)
