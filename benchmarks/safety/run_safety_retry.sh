#!/usr/bin/env bash
# Issue 53's faults re-tried as a new user would, in a scratch folder: foreign checkpoints and client states, a missing
# or unsafe client-state file, duplicate seeds, stale temporaries, a user's own files in --out, a damaged summary, the
# empty config, tiny data.fraction, --resume where there is no run, lax types, a multi-line --set, clients without data.
# Usage: mkdir /tmp/retry && cd /tmp/retry && bash /path/to/benchmarks/safety/run_safety_retry.sh > retry.log 2>&1
# (needs pfedkit installed; the output of one run is results/run_safety_retry.txt)
cat > base.toml <<'TOML'
[data]
dataset = "digits"
[partition]
clients = 10
min_samples = 20
[model]
name = "smallcnn"
[train]
rounds = 6
batch_size = 16
lr = 0.05
[run]
workers = 1
TOML
set -x
pfedkit() { python -m pfedkit "$@"; }
pfedkit run base.toml --out A --set train.rounds=6 --set run.checkpoint_every=3 --quiet 2>&1 | tail -1
pfedkit run base.toml --out B --set train.rounds=6 --set run.checkpoint_every=3 --set run.seed=1 --quiet 2>&1 | tail -1
cp B/checkpoint.pt A/; pfedkit run --out A --resume --set train.rounds=8 --quiet; echo "exit $?"
pfedkit run base.toml --out C --set method.name='"fedper"' --set train.rounds=6 --set run.checkpoint_every=3 --quiet 2>&1 | tail -1
cp C/checkpoint.pt B/; pfedkit run --out B --resume --set train.rounds=8 --quiet; echo "exit $?"
pfedkit run base.toml --out D --set run.client_state='"disk"' --set run.checkpoint_every=3 --quiet 2>&1 | tail -1
rm D/client-state/client-3/after-5.pt; pfedkit run --out D --resume --set train.rounds=8 --quiet; echo "exit $?"
pfedkit compare base.toml --methods fedavg --seeds 0,00,1 --out E; echo "exit $?"
python -c "import torch, pathlib; torch.save({'x': pathlib.Path('/etc')}, 'D/client-state/client-2/after-5.pt')"
pfedkit run --out D --resume --set train.rounds=8 --quiet; echo "exit $?"
touch A/.checkpoint.pt.abcd1234; pfedkit run base.toml --out F --quiet 2>&1 | tail -1; touch F/.checkpoint.pt.zz9_8y7x; pfedkit run --out F --resume --set train.rounds=7 --quiet 2>&1 | tail -1; ls -a F | grep -c "checkpoint.pt\." 
mkdir exp; cp base.toml exp/config.toml; echo "# my notes" > exp/notes.txt
pfedkit run exp/config.toml --out exp --quiet; echo "exit $?"
pfedkit run base.toml --out exp --quiet; echo "exit $?"
echo "{ half" > A/summary.json; pfedkit curves A; echo "exit $?"
printf '' > empty.toml; pfedkit run empty.toml --out G --set train.rounds=2 --quiet 2>&1 | tail -2
pfedkit run empty.toml --out H --set data.fraction=1e-9; echo "exit $?"
pfedkit run --out nowhere --resume; echo "exit $?"
pfedkit run empty.toml --out I --set train.rounds=true; echo "exit $?"
pfedkit run empty.toml --out I --set $'train.lr=0.1\nrounds=3'; echo "exit $?"
pfedkit run empty.toml --out J --set partition.clients=300 --set partition.min_samples=0; echo "exit $?"
