# Shortcuts for the steps in README.md and docs/operations.md ("kind and minikube").
# Each target is one script or command.
IMAGE ?= ctrain:latest
KIND_CLUSTER ?= ctrain

.PHONY: setup build test unit demo demo-down format image image-docker image-cuda kind-load minikube-load \
	install install-namespaced uninstall example bench gpu-check

setup:            ; bash tools/setup.sh
build:            ; cmake -S . -B build -G Ninja && ninja -C build
test:             ; bash tools/test.sh
unit:             ; bash tools/test.sh --unit
demo:             ; bash tools/demo.sh
demo-down:        ; bash tools/demo.sh down
format:           ; bash tools/format.sh
image:            ; bash tools/image/build.sh ctrain
image-docker:     ; docker build -t $(IMAGE) .
image-cuda:       ; docker build -t ctrain:cuda --build-arg VARIANT=cuda .
kind-load:        ; kind load image-archive "$$(bash tools/image/build.sh ctrain | tail -1)" --name $(KIND_CLUSTER)
minikube-load:    ; minikube image load "$$(bash tools/image/build.sh ctrain | tail -1)"
install:          ; kubectl apply --server-side -k manifests/crds && kubectl apply --server-side -k manifests/
install-namespaced: ; kubectl apply --server-side -k manifests/crds && kubectl apply --server-side -k manifests/namespaced/
uninstall:        ; kubectl delete -k manifests/ --ignore-not-found
example:          ; kubectl apply -f examples/fashion-mnist.yaml
bench:            ; python3 bench/train.py && build/bench/bench_allreduce && python3 bench/controller.py
gpu-check:        ; bash tools/gpu-check.sh
