"""A raw TCP client with a forged handshake is refused by a worker, which
logs it and goes on to accept its real peer."""
import os
import socket
import time

from workerlib import free_ports, log_of, start


def test_raw_forged_handshake_refused_then_real_peer_joins(tmp_path):
    ports = free_ports(2)
    chief = start(tmp_path, ports, 0, "--rendezvous-timeout", "60")
    # Wait for the chief to listen, then speak to it as an impostor would:
    # a frame-shaped blob with a made-up MAC, and plain garbage.
    deadline = time.monotonic() + 20
    while True:
        try:
            s = socket.create_connection(("127.0.0.1", ports[0]), timeout=2)
            break
        except OSError:
            assert time.monotonic() < deadline, log_of(tmp_path, 0)
            time.sleep(0.1)
    forged = b"CTRN" + (1).to_bytes(4, "big") + b"itest\0" + os.urandom(90)
    s.sendall(forged)
    s.settimeout(5)
    try:
        reply = s.recv(4096)
    except OSError:
        reply = b""
    s.close()
    s2 = socket.create_connection(("127.0.0.1", ports[0]), timeout=2)
    s2.sendall(os.urandom(256))
    s2.close()
    time.sleep(1)
    assert chief.poll() is None, "the chief must survive impostors"
    log = log_of(tmp_path, 0)
    assert "refused" in log, log[-2000:]
    # The real peer (with the job token) still joins and training finishes.
    worker = start(tmp_path, ports, 1, "--rendezvous-timeout", "60")
    assert worker.wait(timeout=180) == 0, log_of(tmp_path, 1)[-2000:]
    assert chief.wait(timeout=60) == 0, log_of(tmp_path, 0)[-2000:]
    assert b"itest" not in reply or len(reply) < 200  # nothing secret echoed back
