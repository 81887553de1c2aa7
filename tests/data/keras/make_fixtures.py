"""Writes the Keras model JSON fixtures test_model_keras.c loads, with real
tf-keras 2.x and Keras 3 (one run each: the backend is chosen at import).

  python tests/data/keras/make_fixtures.py tf_keras|keras3 OUTDIR

The TF venv of bench/train.py (tf_venv()) has both; see docs/models.md."""
import json
import os
import sys


def models(k):
    L = k.layers
    cnn = k.Sequential([
        k.Input(shape=(28, 28, 1)),
        L.Conv2D(32, 3, padding="same", activation="relu"),
        L.BatchNormalization(),
        L.MaxPooling2D(2),
        L.Conv2D(64, 3, padding="same", activation="relu"),
        L.BatchNormalization(),
        L.MaxPooling2D(2),
        L.Flatten(),
        L.Dropout(0.3),
        L.Dense(128, activation="relu"),
        L.Dense(10),
    ], name="fashion_cnn")
    small = k.Sequential([
        k.Input(shape=(28, 28)),
        L.Reshape((28, 28, 1)),
        L.Conv2D(8, (5, 3), strides=2, use_bias=False),
        L.BatchNormalization(center=False, momentum=0.9, epsilon=1e-3),
        L.ReLU(),
        L.AveragePooling2D(2, padding="same"),
        L.GlobalAveragePooling2D(),
        L.Dense(10, activation="softmax"),
    ], name="small_cnn")
    return {"cnn": cnn, "small": small}


def main():
    flavour, outdir = sys.argv[1], sys.argv[2]
    if flavour == "tf_keras":
        os.environ["TF_USE_LEGACY_KERAS"] = "1"
        import tf_keras as k
    else:
        import keras as k
    for name, m in models(k).items():
        text = json.dumps(json.loads(m.to_json()), indent=1, sort_keys=True)
        with open(os.path.join(outdir, f"{name}-{flavour}.json"), "w") as f:
            f.write(text + "\n")
        print(name, flavour, k.__version__, m.count_params())


if __name__ == "__main__":
    main()
