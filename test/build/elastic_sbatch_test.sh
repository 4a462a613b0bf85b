#!/usr/bin/env bash
# examples/slurm/elastic.sbatch, run as sbatch runs it (bash, under its own
# set -euo pipefail) with a stand-in scontrol and srun:
#  - a job on 1,000 nodes whose names are long enough that scontrol's output
#    outgrows a pipe (64 KiB) picks its first node and reaches srun, exit 0
#    (`scontrol | head -n 1` exits 141 there, every time, before srun);
#  - the job that hosts the rendezvous removes elastic-<job>.secret when it
#    ends, also when srun fails; a job that joins it leaves the file.
# Usage: elastic_sbatch_test.sh SOURCE_DIR
set -uo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

mkdir -p "$tmp/bin" "$tmp/home"
# scontrol show hostnames LIST: 1,000 names of 208 characters (209 KB).
cat >"$tmp/bin/scontrol" <<'SH'
#!/bin/bash
[[ $1 == show && $2 == hostnames ]] || { echo "scontrol: unexpected $*" >&2; exit 2; }
label=rack-0123456789-abcdefghij-klmnopqrst-uvwxyz
for i in $(seq -w 1 1000); do echo "node$i.$label.$label.$label.$label.cluster.example.org"; done
SH
# srun: records its arguments, makes the secret file as the first launcher
# would, and exits with FAKE_SRUN_RC.
cat >"$tmp/bin/srun" <<'SH'
#!/bin/bash
printf '%s\n' "$@" >"$FAKE_SRUN_ARGS"
echo secret >"$COLLIE_JOB_SECRET_FILE"
exit "${FAKE_SRUN_RC:-0}"
SH
chmod +x "$tmp/bin/scontrol" "$tmp/bin/srun"
label=rack-0123456789-abcdefghij-klmnopqrst-uvwxyz
first=node0001.$label.$label.$label.$label.cluster.example.org

# The job script, as sbatch starts it: a clean environment but Slurm's.
job() {
  env -i PATH="$tmp/bin:/usr/bin:/bin" HOME="$tmp/home" SLURM_JOB_NODELIST="node[0001-1000]" \
    COLLIE_SOURCE="$src" COLLIE_BUILD="$tmp/build" FAKE_SRUN_ARGS="$tmp/srun.args" "$@" \
    timeout 120 bash "$src/examples/slurm/elastic.sbatch"
}

echo "== 1,000 nodes with long names: the first is the rendezvous host, srun runs"
rm -f "$tmp/srun.args"
job SLURM_JOB_ID=4242 >"$tmp/out" 2>&1
rc=$?
cat "$tmp/out"
((rc == 0)) || fail "elastic.sbatch exited $rc (141: SIGPIPE of scontrol under pipefail)"
[[ -f $tmp/srun.args ]] || fail "srun never ran"
grep -qxF -- "$first:29400" "$tmp/srun.args" || { cat "$tmp/srun.args"; fail "--rdzv-endpoint is not $first:29400"; }
grep -qxF -- "slurm-4242" "$tmp/srun.args" || fail "--rdzv-id is not slurm-4242"
[[ ! -e $tmp/home/.collie/elastic-4242.secret ]] || fail "the rendezvous job left elastic-4242.secret"

echo "== srun fails: the job says so, and still removes the secret"
job SLURM_JOB_ID=4243 FAKE_SRUN_RC=3 >"$tmp/out" 2>&1
rc=$?
cat "$tmp/out"
((rc == 3)) || fail "elastic.sbatch exited $rc, not srun's 3"
grep -q "collie-elastic: exit 3 at line [0-9]*: srun" "$tmp/out" || fail "no line naming the failed srun"
[[ ! -e $tmp/home/.collie/elastic-4243.secret ]] || fail "elastic-4243.secret left after a failed srun"

echo "== a job that joins rendezvous 4242 leaves its secret to that job"
job SLURM_JOB_ID=4250 RDZV_JOB=4242 RDZV_HOST=node0001 >"$tmp/out" 2>&1
rc=$?
cat "$tmp/out"
((rc == 0)) || fail "the joining job exited $rc"
grep -qxF -- "node0001:29400" "$tmp/srun.args" || fail "the joining job's endpoint is not node0001:29400"
[[ -e $tmp/home/.collie/elastic-4242.secret ]] || fail "a joining job removed the rendezvous job's secret"
echo PASS
