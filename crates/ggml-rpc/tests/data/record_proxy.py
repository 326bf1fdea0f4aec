# Recording TCP proxy used to capture captured_session.txt: one file per
# connection and direction. Usage: record_proxy.py LISTEN_PORT TARGET_PORT OUT_DIR
import socket, sys, threading
lp, tp, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", lp)); ls.listen(8)
n = 0
def pump(a, b, f):
    with open(f, "wb") as fh:
        while True:
            d = a.recv(65536)
            if not d: break
            fh.write(d); fh.flush(); b.sendall(d)
    try: b.shutdown(socket.SHUT_WR)
    except OSError: pass
while True:
    c, _ = ls.accept(); s = socket.create_connection(("127.0.0.1", tp))
    threading.Thread(target=pump, args=(c, s, f"{out}/c{n:02d}.bin"), daemon=True).start()
    threading.Thread(target=pump, args=(s, c, f"{out}/s{n:02d}.bin"), daemon=True).start()
    n += 1
