"""The SLURM batch script of ``kestrel cluster slurm-script``: Ray's own pattern on a job's nodes.

The script starts the Ray head on the job's first node (``srun … ray start --head --block``), a Ray
worker on every other node (``srun … ray start --address HEAD:PORT --block``), waits until every
node has joined, and runs ``kestrel launch --address HEAD:PORT`` in the batch shell. SIGTERM to
the batch shell — SLURM sends it ``--signal=B:TERM@SEC`` seconds before the time limit, or
``scancel --batch --signal=TERM JOB`` — is passed on to ``kestrel launch``, which stops
gracefully (every stored row and the best weights saved, exit status 143). Whatever way the
script ends, its exit trap stops exactly the Ray nodes it started (SIGTERM to their ``srun``
steps: ``ray start --block`` stops its node's processes), never ``ray stop``. A job submitted
again with the same script resumes the run (``--resume`` once ``RUN/config.yml`` exists).

The host names come from ``scontrol show hostnames``; without ``scontrol`` the script expands
the simple forms of ``SLURM_JOB_NODELIST`` itself (``n1,gpu[01-03,07]``). Pure standard library.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from kestrel_core import ConfigError

__all__ = ["SlurmOptions", "slurm_script"]

# SLURM's time formats: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS
_TIME = re.compile(r"^(\d+|\d+:\d\d|\d+:\d\d:\d\d|\d+-\d+|\d+-\d+:\d\d|\d+-\d+:\d\d:\d\d)$")
# a value written into an #SBATCH line, where nothing is quoted
_WORD = re.compile(r"^[A-Za-z0-9_.,+\-]+$")


@dataclass(frozen=True)
class SlurmOptions:
    """What ``kestrel cluster slurm-script`` writes into the batch script.

    Attributes:
        config: the config file (as the job sees it: relative to the folder ``sbatch`` runs in).
        run: the run directory (the same).
        nodes: nodes of the job: the Ray head on the first, a Ray worker on each other.
        cpus_per_node: CPUs of each node given to Ray (``--cpus-per-task``); ``None``: the
            whole node (the job is ``--exclusive``), as Ray detects it.
        gpus_per_node: GPUs of each node (``--gpus-per-task``, ``ray start --num-gpus``).
        time: the job's time limit (SLURM's ``HH:MM:SS``, ``D-HH:MM:SS``, …).
        partition: the partition (queue); ``None``: the site's default.
        account: the account charged; ``None``: the user's default.
        port: the Ray head's port.
        python: the Python of the environment holding Kestrel and Ray on the nodes.
        stop_before: seconds before the time limit at which SLURM sends SIGTERM to the batch
            shell (the graceful stop's time to save and sample).
        job_name: the job's name.
        launch_args: more ``kestrel launch`` arguments (``key=value`` overrides, ``--seed S``).
    """

    config: str
    run: str
    nodes: int = 2
    cpus_per_node: int | None = None
    gpus_per_node: int = 0
    time: str = "01:00:00"
    partition: str | None = None
    account: str | None = None
    port: int = 6379
    python: str = "python3"
    stop_before: int = 120
    job_name: str = "kestrel"
    launch_args: tuple[str, ...] = field(default_factory=tuple)

    def check(self) -> None:
        """Refuse values the script cannot hold.

        Raises:
            ConfigError: a count below its minimum, a time limit SLURM does not read, a port
                outside 1–65535, a partition, account or job name with spaces or shell
                characters, an empty config or run path — one line naming the option.
        """
        if self.nodes < 1:
            raise ConfigError(f"--nodes {self.nodes}: a job needs at least 1 node")
        if self.cpus_per_node is not None and self.cpus_per_node < 1:
            raise ConfigError(f"--cpus-per-node {self.cpus_per_node}: expected at least 1")
        if self.gpus_per_node < 0:
            raise ConfigError(f"--gpus-per-node {self.gpus_per_node}: expected 0 or more")
        if not _TIME.match(self.time):
            raise ConfigError(
                f"--time {self.time!r}: expected a SLURM time limit such as 04:00:00, 90:00 or "
                "2-00:00:00"
            )
        if not 1 <= self.port <= 65535:
            raise ConfigError(f"--port {self.port}: expected a port number from 1 to 65535")
        if self.stop_before < 1:
            raise ConfigError(f"--stop-before {self.stop_before}: expected at least 1 second")
        for flag, value in (
            ("--partition", self.partition),
            ("--account", self.account),
            ("--job-name", self.job_name),
        ):
            if value is not None and not _WORD.match(value):
                raise ConfigError(
                    f"{flag} {value!r}: expected letters, digits and _ . , + - only (it is "
                    "written into an #SBATCH line)"
                )
        for flag, path in (("-c", self.config), ("-o", self.run), ("--python", self.python)):
            if not path.strip():
                raise ConfigError(f"{flag}: expected a path, got an empty one")

    def command(self) -> str:
        """The ``kestrel cluster slurm-script`` command line that writes this script."""
        args = ["kestrel", "cluster", "slurm-script", "-c", self.config, "-o", self.run]
        args += ["--nodes", str(self.nodes)]
        if self.cpus_per_node is not None:
            args += ["--cpus-per-node", str(self.cpus_per_node)]
        if self.gpus_per_node:
            args += ["--gpus-per-node", str(self.gpus_per_node)]
        args += ["--time", self.time]
        if self.partition is not None:
            args += ["--partition", self.partition]
        if self.account is not None:
            args += ["--account", self.account]
        if self.port != 6379:
            args += ["--port", str(self.port)]
        if self.python != "python3":
            args += ["--python", self.python]
        if self.stop_before != 120:
            args += ["--stop-before", str(self.stop_before)]
        if self.job_name != "kestrel":
            args += ["--job-name", self.job_name]
        return shlex.join([*args, *self.launch_args])


def slurm_script(options: SlurmOptions) -> str:
    """The batch script for ``options``: a complete, commented ``sbatch`` script.

    Raises:
        ConfigError: as :meth:`SlurmOptions.check`.

    Example:
        >>> text = slurm_script(SlurmOptions("model/config.yml", "runs/a", nodes=3))
        >>> "#SBATCH --nodes=3" in text and "#SBATCH --signal=B:TERM@120" in text
        True
    """
    options.check()

    def directive(flag: str, value: object, what: str, placeholder: str) -> str:
        if value is None:  # off: sbatch reads no `##SBATCH` line; one `#` less sets it
            return f"# {what} (off: remove one # to set it)\n##SBATCH {flag}={placeholder}"
        return f"# {what}\n#SBATCH {flag}={value}"

    cpus = options.cpus_per_node
    values = {
        "COMMAND": options.command(),
        "JOB_NAME": options.job_name,
        "NODES": str(options.nodes),
        "CPUS": directive(
            "--cpus-per-task", cpus, "CPUs of each node for Ray (unset: all its cores)", "C"
        ),
        "GPUS": directive(
            "--gpus-per-task", options.gpus_per_node or None, "GPUs of each node for Ray", "G"
        ),
        "TIME": options.time,
        "PARTITION": directive("--partition", options.partition, "the partition (queue)", "P"),
        "ACCOUNT": directive("--account", options.account, "the account charged", "A"),
        "STOP": str(options.stop_before),
        "CONFIG": shlex.quote(options.config),
        "RUN": shlex.quote(options.run),
        "LAUNCH_ARGS": " ".join(shlex.quote(a) for a in options.launch_args),
        "PORT": str(options.port),
        "PYTHON": shlex.quote(options.python),
    }
    text = _TEMPLATE
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", value)
    return text


_TEMPLATE = r"""#!/bin/bash
# Kestrel on SLURM: a Ray cluster on this job's nodes, and `kestrel launch` on it.
# Written by: {{COMMAND}}
#
#   sbatch kestrel.sbatch                    # submit, from the folder the paths below are relative to
#   scancel --batch --signal=TERM JOBID      # stop early, gracefully (what the time limit does)
#   sbatch kestrel.sbatch                    # again, after a stop: the launch resumes the run
#
# The Ray head runs on the job's first node, a Ray worker on every other node (an `srun` step
# each, `ray start --block`), and `kestrel launch` runs here in the batch shell, joining them with
# --address. SLURM sends SIGTERM to this shell before the time limit (--signal=B:TERM@SECONDS):
# it is passed on to `kestrel launch`, which stops gracefully - every stored simulation and the
# best weights saved, the posterior sampled, exit status 143 - and then the Ray nodes are stopped.
# Submit the script again to go on: `kestrel launch` resumes RUN (--resume once RUN/config.yml
# exists). The job's exit status is the launch's: 0 completed, 143 stopped by SIGTERM, 1 an error.
#
#SBATCH --job-name={{JOB_NAME}}
#SBATCH --nodes={{NODES}}
#SBATCH --ntasks-per-node=1
# Ray expects whole machines: their cores, ports and /tmp
#SBATCH --exclusive
{{CPUS}}
{{GPUS}}
#SBATCH --time={{TIME}}
{{PARTITION}}
{{ACCOUNT}}
# SIGTERM to this shell (B:) {{STOP}} s before the time limit: the launch stops and saves
#SBATCH --signal=B:TERM@{{STOP}}
#SBATCH --output=kestrel-%j.out

# ---- what to run (edit freely) ------------------------------------------------------------------
CONFIG={{CONFIG}}
RUN={{RUN}}
LAUNCH_ARGS=({{LAUNCH_ARGS}})   # more `kestrel launch` arguments: key=value overrides, --seed S
PORT={{PORT}}   # the Ray head's port
GPUS=${SLURM_GPUS_PER_TASK:-0}   # GPUs of each node given to Ray (--gpus-per-task above)
RAY_OPTIONS=()   # more `ray start` options of every node, e.g. --resources='{"sim": 32}'
# The Python of the environment that holds Kestrel and Ray on every node; activate it here when
# PYTHON is not an absolute path, e.g.:  module load python; source ~/venvs/kestrel/bin/activate
PYTHON={{PYTHON}}
RAY_TEMP=/tmp/ray-$SLURM_JOB_ID   # Ray's sessions and logs on each node (short: socket paths)
# -------------------------------------------------------------------------------------------------

RAY=("$PYTHON" -m ray.scripts.scripts)   # the `ray` command of that Python
KESTREL=("$PYTHON" -m kestrel)           # the `kestrel` command of that Python
export RAY_USAGE_STATS_ENABLED=0
export RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S=0   # nothing is left to drain when a node stops here
export PYTHONUNBUFFERED=1
# Ray's workers (simulators, the estimators' training) at the job's priority, not Ray's 15
export RAY_worker_niceness=${RAY_worker_niceness:-0}
# token authentication on every node and in the launch when a token is there (`ray start --head`
# turns it on by itself, a joining node does not): RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH's file or
# ~/.ray/auth_token; RAY_AUTH_MODE=disabled in the environment opts out
if [[ -z ${RAY_AUTH_MODE:-} && ( -n ${RAY_AUTH_TOKEN:-} || -r ${RAY_AUTH_TOKEN_PATH:-$HOME/.ray/auth_token} ) ]]; then
    export RAY_AUTH_MODE=token
fi

log() { echo "[kestrel.sbatch $(date +%H:%M:%S)] $*"; }

# The job's host names, one a line: `scontrol show hostnames`; without scontrol, the simple forms
# of a node list (n1,gpu[01-03,07]) are expanded here.
hostnames() {
    if command -v scontrol >/dev/null 2>&1; then
        scontrol show hostnames "$1"
        return
    fi
    local rest=$1 pattern='^([^],[]+)\[([^]]+)\]([^,]*)(.*)$' prefix suffix range lo hi i
    local -a ranges
    while [[ -n $rest ]]; do
        rest=${rest#,}
        if [[ $rest =~ $pattern ]]; then
            prefix=${BASH_REMATCH[1]} suffix=${BASH_REMATCH[3]} rest=${BASH_REMATCH[4]}
            IFS=, read -ra ranges <<<"${BASH_REMATCH[2]}"
            for range in "${ranges[@]}"; do
                lo=${range%-*} hi=${range#*-}
                for ((i = 10#$lo; i <= 10#$hi; i++)); do
                    printf '%s%0*d%s\n' "$prefix" "${#lo}" "$i" "$suffix"
                done
            done
        else
            printf '%s\n' "${rest%%,*}"
            if [[ $rest == *,* ]]; then rest=${rest#*,}; else rest=; fi
        fi
    done
}

# The address the other nodes reach the head at: its first IPv4 address that is not a loopback
# one (`hostname --ip-address` gives 127.0.1.1 on some systems), else its host name.
head_ip() {
    local ip
    for ip in $(srun --nodes=1 --ntasks=1 --nodelist="$1" \
        sh -c 'hostname --ip-address; hostname --all-ip-addresses' 2>/dev/null); do
        if [[ $ip != 127.* && $ip != *:* ]]; then
            echo "$ip"
            return
        fi
    done
    echo "$1"
}

# Stop exactly the Ray nodes this job started: SIGTERM to their srun steps, which pass it to
# `ray start --block`, which stops its node's Ray processes (never `ray stop`: it stops every Ray
# on the machine). Runs when the script exits, whatever the reason.
RAY_PIDS=()
stop_ray() {
    local status=$? pid alive i
    trap '' TERM INT
    if ((${#RAY_PIDS[@]})); then
        log "stopping the Ray cluster"
        for pid in "${RAY_PIDS[@]:1}" "${RAY_PIDS[0]}"; do  # the workers first, the head last
            kill -TERM "$pid" 2>/dev/null
        done
        for ((i = 0; i < 60; i++)); do
            alive=0
            for pid in "${RAY_PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
            ((alive)) || break
            sleep 1
        done
        for pid in "${RAY_PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null; done
        wait
        log "Ray cluster stopped"
    fi
    exit "$status"
}
trap stop_ray EXIT

# SIGTERM (or SIGINT) to this shell: before the launch, end the job; during it, pass it on to
# `kestrel launch`, which stops gracefully and saves.
LAUNCH_PID=
on_signal() {
    if [[ -n $LAUNCH_PID ]]; then
        log "SIGTERM: stopping kestrel launch gracefully"
        kill -TERM "$LAUNCH_PID" 2>/dev/null
    else
        log "SIGTERM before the launch: stopping"
        exit 143
    fi
}
trap on_signal TERM INT

if [[ -z ${SLURM_JOB_NODELIST:-} || -z ${SLURM_JOB_ID:-} ]]; then
    echo "kestrel.sbatch: SLURM_JOB_NODELIST and SLURM_JOB_ID are not set: submit this script with sbatch" >&2
    exit 2
fi
mapfile -t NODES < <(hostnames "$SLURM_JOB_NODELIST")
HEAD_NODE=${NODES[0]}
HEAD_IP=$(head_ip "$HEAD_NODE")
ADDRESS=$HEAD_IP:$PORT

# one task a node, with the node's CPUs and GPUs of this job
STEP=(--nodes=1 --ntasks=1)
NODE_OPTIONS=(--temp-dir="$RAY_TEMP" --num-gpus="$GPUS" "${RAY_OPTIONS[@]}")
if [[ -n ${SLURM_CPUS_PER_TASK:-} ]]; then
    STEP+=(--cpus-per-task="$SLURM_CPUS_PER_TASK")
    NODE_OPTIONS+=(--num-cpus="$SLURM_CPUS_PER_TASK")
fi
if ((GPUS > 0)); then STEP+=(--gpus-per-task="$GPUS"); fi

log "Ray head on $HEAD_NODE at $ADDRESS; ${#NODES[@]} node(s): ${NODES[*]}"
srun "${STEP[@]}" --nodelist="$HEAD_NODE" "${RAY[@]}" start --head --block \
    --node-ip-address="$HEAD_IP" --port="$PORT" "${NODE_OPTIONS[@]}" &
RAY_PIDS+=($!)

# wait until the head listens (5 minutes at most)
for ((i = 0; ; i++)); do
    if (exec 3<>"/dev/tcp/$HEAD_IP/$PORT") 2>/dev/null; then break; fi
    if ! kill -0 "${RAY_PIDS[0]}" 2>/dev/null || ((i >= 300)); then
        log "error: the Ray head did not start at $ADDRESS (see the lines above)"
        exit 1
    fi
    sleep 1
done

for node in "${NODES[@]:1}"; do
    srun "${STEP[@]}" --nodelist="$node" "${RAY[@]}" start --block \
        --address="$ADDRESS" "${NODE_OPTIONS[@]}" &
    RAY_PIDS+=($!)
done

# wait until every node has joined (5 minutes at most): the launch sizes its work to them
"$PYTHON" - "$ADDRESS" "${#NODES[@]}" <<'EOF' || exit 1
import sys, time
import ray
from kestrel_ray import init_ray  # joins as `kestrel launch` does (token authentication)

init_ray(sys.argv[1])
want, deadline = int(sys.argv[2]), time.monotonic() + 300
while (alive := sum(bool(n["Alive"]) for n in ray.nodes())) < want:
    if time.monotonic() > deadline:
        sys.exit(f"kestrel.sbatch: only {alive} of {want} Ray nodes joined within 300 s")
    time.sleep(2)
print(f"[kestrel.sbatch] {alive} Ray node(s) up", flush=True)
EOF

RESUME=()
if [[ -f $RUN/config.yml ]]; then RESUME=(--resume); fi   # a job submitted again: go on
log "kestrel launch -c $CONFIG -o $RUN ${RESUME[*]} --address $ADDRESS ${LAUNCH_ARGS[*]}"
"${KESTREL[@]}" launch -c "$CONFIG" -o "$RUN" "${RESUME[@]}" --address="$ADDRESS" \
    --progress=log "${LAUNCH_ARGS[@]}" &
LAUNCH_PID=$!
# `wait` returns early when a signal is trapped: wait again until the launch itself has ended
while :; do
    wait "$LAUNCH_PID"
    status=$?
    kill -0 "$LAUNCH_PID" 2>/dev/null || break
done
log "kestrel launch ended with exit status $status"
exit "$status"
"""
