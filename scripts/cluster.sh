#!/usr/bin/env bash
# A local Spark cluster from the pip-installed PySpark, nothing downloaded:
#   scripts/cluster.sh start   standalone master on 127.0.0.1:7077 with two workers, and a
#                              Spark Connect server on 127.0.0.1:15002; returns once they work
#   scripts/cluster.sh stop    stops exactly those processes, by their pid files
#   scripts/cluster.sh status
# State (pid files, logs, work dirs) lives in $RESTREAM_CLUSTER_DIR (default .restream/cluster).
# Other settings (for a second cluster beside the first, as the tests start): RESTREAM_MASTER_PORT,
# RESTREAM_MASTER_UI_PORT (workers' UIs take the next ports), RESTREAM_CONNECT_PORT,
# RESTREAM_WORKERS (0 for a master alone), RESTREAM_WORKER_CORES, RESTREAM_WORKER_MEMORY,
# RESTREAM_CONNECT=0 (no Connect server), RESTREAM_CLUSTER_WAIT (seconds). A Connect server
# started with SPARK_CONNECT_AUTHENTICATE_TOKEN in its environment requires that token.
#
# Started as root, the workers run as another Unix user, $RESTREAM_WORKER_USER (default
# restream-worker, created with useradd --system on first use), that cannot read the kernel's
# files: their work dirs live under that user's home, and their Python is one they can run
# (the kernel's interpreter when they can, else a copy of it, without its site-packages, under
# that home) with the checkout's virtualenv packages on its path. It comes first on the
# workers' PATH as `python3`, the name a replay on a spark:// master asks the workers for.
# Started as another user, the workers run as that same user.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$root/.venv/bin/python}
dir=${RESTREAM_CLUSTER_DIR:-$root/.restream/cluster}
master_port=${RESTREAM_MASTER_PORT:-7077}
master_ui=${RESTREAM_MASTER_UI_PORT:-8080}
connect_port=${RESTREAM_CONNECT_PORT:-15002}
workers=${RESTREAM_WORKERS:-2}
worker_cores=${RESTREAM_WORKER_CORES:-1}
worker_memory=${RESTREAM_WORKER_MEMORY:-2g}
with_connect=${RESTREAM_CONNECT:-1}
wait_s=${RESTREAM_CLUSTER_WAIT:-120}
worker_user=${RESTREAM_WORKER_USER:-restream-worker}

spark_home() { "$python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))'; }
java_home() { "$python" -c 'from restream_kit.engines.spark.java import ensure_java_home; print(ensure_java_home())'; }

start_daemon() {  # name, then the command
    local name=$1; shift
    if [[ -f $dir/$name.pid ]] && kill -0 "$(cat "$dir/$name.pid")" 2>/dev/null; then
        echo "cluster: $name already running (pid $(cat "$dir/$name.pid"))"
        return
    fi
    nohup "$@" >"$dir/$name.log" 2>&1 &
    echo $! >"$dir/$name.pid"
}

alive_workers() {
    "$python" - "$master_ui" <<'PY'
import json, sys, urllib.request
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/json/", timeout=2) as r:
        state = json.load(r)
    print(sum(w.get("state") == "ALIVE" for w in state.get("workers", [])))
except Exception:
    print(0)
PY
}

port_open() { "$python" -c "import socket,sys; s=socket.socket(); s.settimeout(1); sys.exit(s.connect_ex(('127.0.0.1', $1)))"; }

# -- the workers' user, directories and Python ------------------------------------------------

as_worker=()    # the command prefix that runs a worker as its user
worker_root=""  # the workers' own directory: their work dirs and bin/python3

worker_setup() {
    if ((EUID != 0)); then
        echo "cluster: not root, so the workers run as $(id -un), the same user as the master"
        worker_root=$dir/workers
        mkdir -p "$worker_root/bin"
        ln -sfn "$python" "$worker_root/bin/python3"
        return
    fi
    if ! id -u "$worker_user" >/dev/null 2>&1; then
        useradd --system --user-group --home-dir "/var/lib/$worker_user" --shell /usr/sbin/nologin \
            "$worker_user"
    fi
    local home
    home=$(getent passwd "$worker_user" | cut -d: -f6)
    mkdir -p "$home"
    chown "$worker_user:" "$home"
    chmod 755 "$home"
    as_worker=(setpriv --reuid "$worker_user" --regid "$(id -g "$worker_user")" --init-groups
        env HOME="$home" USER="$worker_user" LOGNAME="$worker_user")
    # One directory per cluster (named after its state directory), removed by stop.
    worker_root=$home/clusters/$(printf %s "$dir" | cksum | cut -d' ' -f1)
    rm -rf "$worker_root"
    mkdir -p "$worker_root/bin"
    chown -R "$worker_user:" "$worker_root"
    chmod 700 "$worker_root"
    echo "$worker_root" >"$dir/worker-root"
    let_worker_through "$root/.venv"
    local wpython
    if "${as_worker[@]}" "$python" -c 'import pyarrow, pyspark' 2>/dev/null; then
        wpython=$python
    else
        wpython=$(worker_python "$home")
    fi
    ln -sfn "$wpython" "$worker_root/bin/python3"
    if ! "${as_worker[@]}" "$worker_root/bin/python3" -c 'import pyarrow, pyspark, polars' 2>"$dir/worker-python.err"; then
        echo "cluster: user $worker_user cannot run Python with this checkout's packages:" >&2
        tail -3 "$dir/worker-python.err" >&2
        exit 1
    fi
    echo "cluster: workers run as user $worker_user (Python: $wpython)"
}

let_worker_through() {  # the worker user must reach the checkout's packages and Spark's jars:
    # a directory on their way that others cannot enter (a clone in a private temporary
    # directory) gets o+x, search only: nothing in it becomes readable that was not.
    local path d
    for path in "$@"; do
        d=$(readlink -f "$path")
        while [[ -n $d && $d != / ]]; do
            if [[ -d $d ]] && ! "${as_worker[@]}" test -x "$d" 2>/dev/null; then
                if [[ -O $d ]] && chmod o+x "$d"; then
                    echo "cluster: let user $worker_user through $d (o+x)"
                fi
            fi
            d=$(dirname "$d")
        done
    done
}

worker_python() {  # a copy of the kernel's interpreter the worker user can run; prints its path
    local home=$1 base ver full site copy
    read -r base ver full site < <("$python" -c 'import platform, sys, sysconfig
print(sys.base_prefix, "%d.%d" % sys.version_info[:2], platform.python_version(), sysconfig.get_paths()["purelib"])')
    copy=$home/python-$full-$(printf %s "$base" | cksum | cut -d' ' -f1)
    if [[ ! -f $copy/.complete ]]; then
        rm -rf "$copy"
        mkdir -p "$copy/bin" "$copy/lib"
        cp -L "$base/bin/python$ver" "$copy/bin/python$ver.bin"
        cp -a "$base"/lib/libpython"$ver"*.so* "$copy/lib/" 2>/dev/null || true
        (cd "$base/lib" && tar cf - --exclude="python$ver/site-packages" --exclude="python$ver/test" \
            --exclude="python$ver/idlelib" --exclude="python$ver/tkinter" "python$ver") |
            (cd "$copy/lib" && tar xf -)
        mkdir -p "$copy/lib/python$ver/site-packages"
        # The packages come from the directory the wrapper names, read at every start.
        echo "import os, site; d = os.environ.get('RESTREAM_WORKER_SITE'); d and site.addsitedir(d)" \
            >"$copy/lib/python$ver/site-packages/restream-worker.pth"
        touch "$copy/.complete"
    fi
    cat >"$copy/bin/python$ver.$(printf %s "$site" | cksum | cut -d' ' -f1)" <<SH
#!/bin/sh
# The kernel's Python $full, copied where user $worker_user can run it, with $site.
LD_LIBRARY_PATH=$copy/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} RESTREAM_WORKER_SITE=$site \\
    exec $copy/bin/python$ver.bin "\$@"
SH
    chmod 755 "$copy/bin/python$ver.$(printf %s "$site" | cksum | cut -d' ' -f1)"
    chmod -R a+rX "$copy"
    echo "$copy/bin/python$ver.$(printf %s "$site" | cksum | cut -d' ' -f1)"
}

start() {
    mkdir -p "$dir"
    chmod 700 "$dir"
    worker_setup
    export SPARK_HOME JAVA_HOME
    SPARK_HOME=$(spark_home)
    JAVA_HOME=$(java_home)
    export PYSPARK_PYTHON=$python SPARK_LOCAL_IP=127.0.0.1 SPARK_NO_DAEMONIZE=1
    local class="$SPARK_HOME/bin/spark-class"
    start_daemon master "$class" org.apache.spark.deploy.master.Master \
        --host 127.0.0.1 --port "$master_port" --webui-port "$master_ui"
    for i in $(seq 1 "$workers"); do
        mkdir -p "$worker_root/work-$i"
        ((EUID != 0)) || chown "$worker_user:" "$worker_root/work-$i"
        PATH=$worker_root/bin:$PATH start_daemon "worker-$i" "${as_worker[@]}" "$class" \
            org.apache.spark.deploy.worker.Worker "spark://127.0.0.1:$master_port" --host 127.0.0.1 \
            --cores "$worker_cores" --memory "$worker_memory" \
            --webui-port $((master_ui + i)) --work-dir "$worker_root/work-$i"
    done
    # The Connect server is its own driver; local[2] keeps it from taking the workers' cores.
    ((with_connect)) && start_daemon connect "$SPARK_HOME/bin/spark-submit" \
        --class org.apache.spark.sql.connect.service.SparkConnectServer --master 'local[2]' \
        --conf spark.connect.grpc.binding.address=127.0.0.1 \
        --conf spark.connect.grpc.binding.port="$connect_port" \
        --conf spark.ui.enabled=false --name restream-connect spark-internal
    local deadline=$((SECONDS + wait_s))
    until [[ $(alive_workers) -ge $workers ]] && { ! ((with_connect)) || port_open "$connect_port"; } &&
        port_open "$master_port"; do
        if ((SECONDS > deadline)); then
            echo "cluster: not ready after ${wait_s}s (workers alive: $(alive_workers)); logs in $dir" >&2
            stop
            exit 1
        fi
        for name in master connect $(seq -f "worker-%g" 1 "$workers"); do
            [[ -f $dir/$name.pid ]] || continue
            if ! kill -0 "$(cat "$dir/$name.pid")" 2>/dev/null; then
                echo "cluster: $name exited; see $dir/$name.log" >&2
                tail -5 "$dir/$name.log" >&2 || true
                stop
                exit 1
            fi
        done
        sleep 1
    done
    echo -n "cluster: master spark://127.0.0.1:$master_port ($workers workers)"
    if ((with_connect)); then echo ", connect sc://127.0.0.1:$connect_port"; else echo; fi
}

stop() {
    [[ -d $dir ]] || return 0
    local pids=()
    for pidfile in "$dir"/*.pid; do
        [[ -f $pidfile ]] || continue
        local pid
        pid=$(cat "$pidfile")
        if kill -0 "$pid" 2>/dev/null; then
            kill "$pid" 2>/dev/null || true
            pids+=("$pid")
        fi
        rm -f "$pidfile"
    done
    for _ in $(seq 1 20); do
        local left=0
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && left=1; done
        ((left)) || break
        sleep 0.5
    done
    for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    # The workers' own directory (when they ran as another user): under that user's home only.
    if [[ -f $dir/worker-root ]]; then
        local root_dir
        root_dir=$(cat "$dir/worker-root")
        [[ $root_dir == */clusters/* ]] && rm -rf "$root_dir"
        rm -f "$dir/worker-root"
    fi
    echo "cluster: stopped ${#pids[@]} process(es)"
}

status() {
    for pidfile in "$dir"/*.pid; do
        [[ -f $pidfile ]] || { echo "cluster: not running"; return; }
        local name pid
        name=$(basename "$pidfile" .pid)
        pid=$(cat "$pidfile")
        if kill -0 "$pid" 2>/dev/null; then echo "$name: running (pid $pid)"; else echo "$name: dead"; fi
    done
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
