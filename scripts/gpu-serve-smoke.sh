#!/usr/bin/env bash
# `optimate serve` on a GPU with Llama-3-8B-shaped random weights and the Llama 3 tokenizer
# (models/llama3-tokenizer, from scripts/setup.sh): starts the server, checks a token-id
# completion (plain and streamed, with usage), a text completion, an over-long prompt refused
# with 400, /metrics, and a clean SIGTERM. Usage: gpu-serve-smoke.sh OPTIMATE_BIN
set -uo pipefail
bin=${1:?usage: gpu-serve-smoke.sh OPTIMATE_BIN}
root=$(cd "$(dirname "$0")/.." && pwd)
port=${OPTIMATE_SMOKE_PORT:-8123}
url=http://127.0.0.1:$port
"$bin" serve --model "$root/configs/models/llama-3-8b" --load-format dummy --device cuda \
  --tokenizer "$root/models/llama3-tokenizer" --served-model-name llama3-dummy --port "$port" \
  --max-num-seqs 64 --max-model-len 4096 &
pid=$!
body_file=$(mktemp)
trap 'kill $pid 2>/dev/null; rm -f "$body_file"' EXIT
for _ in $(seq 1 120); do
  curl -sf "$url/health" >/dev/null && break
  kill -0 $pid 2>/dev/null || { echo "server exited during start-up"; exit 1; }
  sleep 1
done
curl -sf "$url/health" >/dev/null || { echo "server not healthy after 120 s"; exit 1; }
status=0
check() { # name, expected HTTP status, curl args...
  local name=$1 want=$2; shift 2
  local got
  got=$(curl -s -o $body_file -w '%{http_code}' "$@")
  if [[ $got != "$want" ]]; then echo "FAIL $name: HTTP $got (want $want): $(head -c 300 $body_file)"; status=1
  else echo "ok   $name"; fi
}
body='{"model":"llama3-dummy","prompt":[128000,791,6460,374],"max_tokens":16,"ignore_eos":true,"temperature":0}'
check "completion with token ids" 200 -H 'Content-Type: application/json' -d "$body" "$url/v1/completions"
python3 - $body_file <<'PY' || status=1
import json, sys
j = json.load(open(sys.argv[1]))
u = j["usage"]
assert u["prompt_tokens"] == 4 and u["completion_tokens"] == 16, u
print("ok   usage", u)
PY
stream='{"model":"llama3-dummy","prompt":[128000,791],"max_tokens":8,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true},"temperature":0.8,"top_p":0.9,"seed":5}'
check "streamed sampled completion" 200 -H 'Content-Type: application/json' -d "$stream" "$url/v1/completions"
grep -q '"completion_tokens":8' $body_file && grep -q '\[DONE\]' $body_file && echo "ok   stream usage and [DONE]" \
  || { echo "FAIL stream: $(tail -c 300 $body_file)"; status=1; }
check "text completion (Llama 3 tokenizer)" 200 -H 'Content-Type: application/json' \
  -d '{"model":"llama3-dummy","prompt":"The capital of France is","max_tokens":4}' "$url/v1/completions"
grep -q '"prompt_tokens":6' $body_file && echo "ok   text prompt tokenized (6 tokens with BOS)" \
  || { echo "FAIL text prompt usage: $(head -c 300 $body_file)"; status=1; }
long=$(python3 -c 'print(",".join(["791"] * 5000))')
check "prompt past the context" 400 -H 'Content-Type: application/json' \
  -d "{\"model\":\"llama3-dummy\",\"prompt\":[$long],\"max_tokens\":4}" "$url/v1/completions"
check "greedy completion for generate to match" 200 -H 'Content-Type: application/json' \
  -d '{"model":"llama3-dummy","prompt":"The capital of France is","max_tokens":12,"temperature":0,"ignore_eos":true}' \
  "$url/v1/completions"
served_text=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["text"], end="")' $body_file)
check "metrics" 200 "$url/metrics"
grep -q '^vllm:num_requests_running' $body_file || { echo "FAIL metrics lack vllm:num_requests_running"; status=1; }
kill -TERM $pid
wait $pid
rc=$?
trap 'rm -f "$body_file"' EXIT
[[ $rc -eq 0 ]] && echo "ok   SIGTERM exit 0" || { echo "FAIL server exit $rc"; status=1; }
# optimate generate drives the same engine: same weights (same seed), same greedy text.
generated=$("$bin" generate --model "$root/configs/models/llama-3-8b" --load-format dummy --device cuda \
  --tokenizer "$root/models/llama3-tokenizer" --max-model-len 4096 --max-num-seqs 64 \
  --prompt "The capital of France is" --max-tokens 12 --temperature 0 --ignore-eos 2>"$body_file")
if [[ "$generated" == "$served_text" ]] && grep -q "generation: 12 tokens" "$body_file"; then
  echo "ok   generate --device cuda: the server's greedy text ($(tail -1 $body_file))"
else
  echo "FAIL generate --device cuda: '$generated' vs served '$served_text' ($(tail -2 $body_file))"; status=1
fi
echo "serve smoke: $([[ $status -eq 0 ]] && echo passed || echo FAILED)"
exit $status
