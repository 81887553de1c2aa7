"""Fashion-MNIST with MultiWorkerMirroredStrategy in a custom training loop,
tf.train.CheckpointManager on the shared claim: stock TensorFlow, nothing of
ctrain in it. The chief writes the checkpoints every SAVE_EVERY steps (every
task calls save, as MWMS requires; the others write to a scratch directory);
a restarted gang restores the chief's newest one and goes on from its step."""
import gzip
import json
import os

import numpy as np
import tensorflow as tf

STEPS = int(os.environ.get("STEPS", "400"))
SAVE_EVERY = int(os.environ.get("SAVE_EVERY", "50"))
ROOT = os.path.join(os.environ.get("BACKUP_ROOT", "/ckpt"), "tf-loop")

cfg = json.loads(os.environ["TF_CONFIG"])
task = cfg["task"]
print(f"TF_CONFIG task {task['type']}:{task['index']}, cluster {cfg['cluster']}", flush=True)
strategy = tf.distribute.MultiWorkerMirroredStrategy()
print(f"replicas in sync: {strategy.num_replicas_in_sync}", flush=True)


def idx(path):
    with gzip.open(path) as f:
        raw = f.read()
    dims = np.frombuffer(raw[4:4 + 4 * raw[3]], dtype=">u4")
    return np.frombuffer(raw[4 + 4 * raw[3]:], dtype=np.uint8).reshape(dims)


x = idx("/data/train-images-idx3-ubyte.gz").astype("float32") / 255.0
y = idx("/data/train-labels-idx1-ubyte.gz").astype("int64")
xt = idx("/data/t10k-images-idx3-ubyte.gz").astype("float32") / 255.0
yt = idx("/data/t10k-labels-idx1-ubyte.gz").astype("int64")
GLOBAL_BATCH = 32 * strategy.num_replicas_in_sync
opts = tf.data.Options()
opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
ds = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(60000, seed=1).repeat()
      .batch(GLOBAL_BATCH).with_options(opts))

with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.layers.Flatten(input_shape=(28, 28)),
        tf.keras.layers.Dense(128, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    optimizer = tf.keras.optimizers.Adam(0.002)
    step = tf.Variable(0, dtype=tf.int64, trainable=False)
    ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)
loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(
    from_logits=True, reduction=tf.keras.losses.Reduction.NONE)

chief = task["type"] == "chief"
save_dir = ROOT if chief else f"/tmp/tf-loop-{task['type']}-{task['index']}"
manager = tf.train.CheckpointManager(ckpt, save_dir, max_to_keep=2)
latest = tf.train.latest_checkpoint(ROOT)
if latest:
    ckpt.restore(latest)
    print(f"resumed from {latest} at step {int(step.numpy())}", flush=True)


@tf.function
def train_step(it):
    def fn(inputs):
        xb, yb = inputs
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(yb, model(xb, training=True)),
                                              global_batch_size=GLOBAL_BATCH)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                      model.trainable_variables))
        return loss
    return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(fn, args=(next(it),)),
                           axis=None)


it = iter(strategy.experimental_distribute_dataset(ds))
while int(step.numpy()) < STEPS:
    loss = train_step(it)
    step.assign_add(1)
    s = int(step.numpy())
    if s % SAVE_EVERY == 0:
        manager.save(checkpoint_number=s)
        print(f"step {s} loss {float(loss):.4f} saved", flush=True)
logits = model(xt, training=False)
acc = float(np.mean(np.argmax(logits.numpy(), axis=1) == yt))
print(f"test accuracy: {acc:.4f}", flush=True)
