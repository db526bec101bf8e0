"""The ``Examples:`` block at the end of a command's ``--help`` (and of docs/operations.md).

Each example is a comment line and one command line that fits an 80-column terminal unwrapped;
tests/commands/test_cli_help_examples.py parses every ``verlctl …`` line of every help page with the command's own
parser, so an example cannot name a flag that does not exist. Only the standard library is imported here:
this module is loaded for ``verlctl --help``.
"""

from __future__ import annotations

#: Command name (a sub-command as ``"export slurm"``) -> (comment, command line) pairs, in the order shown.
EXAMPLES: dict[str, list[tuple[str, str]]] = {
    "detect": [
        ("what this machine has: devices, images, models, datasets, network", "verlctl detect"),
        ("only the NPUs, as JSON", "verlctl detect npu --json"),
    ],
    "init": [
        ("ask in rounds (pre-filled from this machine), then write run.yaml", "verlctl init"),
        ("start from a spec and ask only what it leaves open", "verlctl init -c base.yaml -o exp1.yaml"),
        ("ask nothing: a copy of a complete spec with 100 steps (for scripts)",
         "verlctl init --yes -c run.yaml --set train.steps=100 -o exp2.yaml"),
    ],
    "plan": [
        ("the resolved values, the feature states and the findings", "verlctl plan -c run.yaml"),
        ("the same with recompute added to the spec's features, as JSON",
         "verlctl plan -c run.yaml --features recompute --json"),
        ("write start_verl.sh and run_training.sh to read them", "verlctl plan -c run.yaml -o scripts/"),
    ],
    "check": [
        ("the spec against this machine: paths, devices, memory, image, network", "verlctl check -c run.yaml"),
        ("only four of the devices", "verlctl check -c run.yaml --set cluster.devices=0,1,2,3"),
    ],
    "launch": [
        ("one host, Docker: a new container from the default image; OOM recovery on",
         "verlctl launch -c run.yaml --watch"),
        ("one host, no container: verl installed on this host (runtime host)",
         "verlctl launch -c run.yaml --set container.runtime=host --watch"),
        ("SSH hosts: node1 is the Ray head, each node gets its own container",
         "verlctl launch -c run.yaml --set cluster.nodes=node1,node2 --watch"),
        ("Slurm: sbatch the job on 2 nodes of a partition",
         "verlctl launch -c run.yaml --backend slurm -N 2 --partition npu"),
        ("every action in order, the scripts written to scripts/; nothing runs",
         "verlctl launch -c run.yaml --dry-run -o scripts/"),
    ],
    "status": [
        ("the newest run: state, progress, last metrics, last error", "verlctl status"),
        ("a run by the random suffix of its id, with charts of its steps", "verlctl status 1a9f --plot"),
        ("for a script", "verlctl status --json"),
    ],
    "logs": [
        ("follow the newest run's log", "verlctl logs -f"),
        ("the whole log of a run", "verlctl logs 1a9f -n 0"),
    ],
    "stop": [
        ("stop the newest run (only its own processes)", "verlctl stop"),
        ("stop a run and remove the container it created", "verlctl stop 1a9f --remove-container"),
    ],
    "watch": [
        ("follow the newest run in this terminal; recover it from OOM", "verlctl watch"),
        ("a run by its id's suffix; each alert as JSON to a command",
         "verlctl watch 1a9f --notify-cmd 'mail -s verl me@example.com'"),
    ],
    "diagnose": [
        ("the root cause of a failure in a log", "verlctl diagnose train.log"),
    ],
    "report": [
        ("one HTML page for the newest run (verlctl-report-RUN.html)", "verlctl report"),
        ("a run by its id's suffix, to a named file", "verlctl report 1a9f -o run.html"),
    ],
    "bundle": [
        ("a bug-report archive of the newest run", "verlctl bundle -o bundle.tar.gz"),
    ],
    "export-hf": [
        ("the newest checkpoint of a run as a Hugging Face model", "verlctl export-hf 1a9f -o hf-model/"),
    ],
    "features": [
        ("every feature, its mask bit and default", "verlctl features"),
        ("what a mask turns on, and what its exclusions turn off", "verlctl features --mask 1110011"),
    ],
    "import": [
        ("read a verl launch script into run.yaml, then check it",
         "verlctl import run_dapo_qwen3_8b.sh -o run.yaml"),
    ],
    "export slurm": [
        ("a batch script for 2 nodes; sbatch job.sbatch submits it",
         "verlctl export slurm -c run.yaml -N 2 --partition npu -o job.sbatch"),
        ("print it instead, with a time limit", "verlctl export slurm -c run.yaml --time 24:00:00"),
    ],
    "export rayjob": [
        ("a RayJob with 2 worker pods; kubectl apply -f rayjob.yaml runs it",
         "verlctl export rayjob -c run.yaml --nodes 2 --pvc ckpt -o rayjob.yaml"),
    ],
    "export volcano": [
        ("a Volcano Job on 2 Ascend hosts; kubectl apply -f volcano-job.yaml runs it",
         "verlctl export volcano -c run.yaml --nodes 2 --pvc ckpt -o volcano-job.yaml"),
        ("in queue team-a, restarts that resume: kubernetes.retries",
         "verlctl export volcano -c run.yaml --pvc ckpt --queue team-a -o job.yaml"),
    ],
}


def epilog(name: str) -> str | None:
    """The command's ``Examples:`` block for its ``--help`` (rich markup escaped), or None when it has none."""
    pairs = EXAMPLES.get(name)
    if not pairs:
        return None
    lines = ["Examples:", ""]
    for i, (comment, command) in enumerate(pairs):
        if i:
            lines.append("")
        lines.append(f"  # {comment}")
        lines.append(f"  {command}")
    # typer renders help text as rich markup: a `[` would start a tag
    return "\n".join(lines).replace("[", "\\[")
