#!/usr/bin/env bash
# Walk one service request through Hearth's whole flow over HTTP: customer,
# catalog item and staff member; a request, confirmed and converted into an
# order; the order assigned; its schedule in service, then done; the order
# completed, with its change log.
#
# Usage:
#   KEY=hk_... scripts/walkthrough.sh [BASE_URL]     (BASE_URL defaults to http://localhost:8080)
#   scripts/walkthrough.sh BASE_URL KEY
#
# KEY is an operator key: `make run` prints one ("operator key: hk_..."), or
# create one with `go run ./cmd/app keys create --merchant demo --role operator`.
# Needs curl and python3 (for reading JSON). Every step is printed; the
# script stops with a non-zero status at the first unexpected answer.
set -euo pipefail

BASE=${1:-${BASE_URL:-http://localhost:8080}}
KEY=${2:-${KEY:-}}
BASE=${BASE%/}
if [[ -z "$KEY" ]]; then
	echo "usage: KEY=hk_... $0 [BASE_URL]   or   $0 BASE_URL KEY" >&2
	exit 2
fi
for tool in curl python3; do
	command -v "$tool" >/dev/null || { echo "$0: $tool is required" >&2; exit 2; }
done

BODY=$(mktemp)
trap 'rm -f "$BODY"' EXIT
STEP=0

# call METHOD PATH EXPECTED_STATUS [JSON_BODY]: prints the step and the
# answer; fails unless the status is the expected one.
call() {
	local method=$1 path=$2 want=$3 data=${4:-}
	STEP=$((STEP + 1))
	echo
	echo "== $STEP. $method $path ${data:+$data}"
	local args=(-sS -o "$BODY" -w '%{http_code}' -X "$method" -H "Authorization: Bearer $KEY")
	if [[ -n "$data" ]]; then
		args+=(-H 'Content-Type: application/json' --data "$data")
	fi
	local status
	status=$(curl "${args[@]}" "$BASE$path") || { echo "curl failed: is Hearth running at $BASE?" >&2; exit 1; }
	python3 -m json.tool <"$BODY" 2>/dev/null | head -n 40 || cat "$BODY"
	echo "-> $status"
	if [[ "$status" != "$want" ]]; then
		echo "$0: $method $path answered $status, expected $want" >&2
		exit 1
	fi
}

# field NAME: a top-level field of the last answer.
field() {
	python3 -c 'import json,sys; v=json.load(open(sys.argv[1])).get(sys.argv[2]); print("" if v is None else v)' "$BODY" "$1"
}

# await PATH PYTHON_CONDITION WHAT: polls GET PATH (the read models follow
# the writes within milliseconds) until the condition holds on the answer
# (bound to `b`), for at most 10 s.
await() {
	local path=$1 cond=$2 what=$3
	for _ in $(seq 1 100); do
		if curl -sS -o "$BODY" -H "Authorization: Bearer $KEY" "$BASE$path" &&
			python3 -c "import json,sys; b=json.load(open(sys.argv[1])); sys.exit(0 if ($cond) else 1)" "$BODY" 2>/dev/null; then
			return 0
		fi
		sleep 0.1
	done
	echo "$0: $what: GET $path never showed it" >&2
	cat "$BODY" >&2
	exit 1
}

TAG=$(date +%H%M%S)
call POST /v1/customers 201 "{\"name\":\"Ada Lovelace $TAG\",\"phone\":\"+44 20 7946 0000\",\"address\":\"12 St James's Square\"}"
CUSTOMER=$(field id)
call POST /v1/catalog-items 201 "{\"name\":\"Deep clean $TAG\",\"base_price_cents\":12000}"
ITEM=$(field id)
call POST /v1/staff 201 "{\"name\":\"Wanda Worker $TAG\",\"phone\":\"+44 20 7946 0001\"}"
STAFF=$(field id)

# A fresh window each run, so that reruns never double-book the new staff
# member (they could not anyway: it is new each time).
DAY=$(python3 -c 'import datetime; print((datetime.date.today() + datetime.timedelta(days=7)).isoformat())')
call POST /v1/service-requests 201 "{\"customer_id\":\"$CUSTOMER\",\"catalog_item_id\":\"$ITEM\",\"content\":\"Deep clean of a two-room flat\",\"source\":\"phone\",\"appointment_start_at\":\"${DAY}T09:00:00Z\",\"appointment_end_at\":\"${DAY}T12:00:00Z\"}"
REQUEST=$(field id)
call POST "/v1/service-requests/$REQUEST/status" 200 '{"status":"confirmed"}'
call POST "/v1/service-requests/$REQUEST/convert" 201
ORDER=$(field id)
[[ "$(field amount_cents)" == 12000 ]] || { echo "$0: the order's amount is not the catalog price" >&2; exit 1; }

call PUT "/v1/orders/$ORDER/assignment" 200 "{\"staff_id\":\"$STAFF\",\"start_at\":\"${DAY}T09:00:00Z\",\"end_at\":\"${DAY}T12:00:00Z\",\"dispatch_note\":\"keys with the porter\"}"
[[ "$(field status)" == dispatching ]] || { echo "$0: the assigned order is not dispatching" >&2; exit 1; }

await "/v1/schedules?staff_id=$STAFF" "b['total'] == 1" "the order's schedule"
SCHEDULE=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["items"][0]["id"])' "$BODY")
call GET "/v1/schedules/$SCHEDULE" 200
call POST "/v1/schedules/$SCHEDULE/status" 200 '{"status":"in_service"}'
call POST "/v1/schedules/$SCHEDULE/status" 200 '{"status":"done"}'

await "/v1/orders/$ORDER" "b['status'] == 'completed'" "the completed order"
call GET "/v1/orders/$ORDER" 200
await "/v1/orders/$ORDER/changes" "len(b['items']) == 5" "the order's change log"
STEP=$((STEP + 1))
echo
echo "== $STEP. GET /v1/orders/$ORDER/changes"
python3 - "$BODY" <<'PY'
import json, sys
for c in json.load(open(sys.argv[1]))["items"]:
    after = c["after"]
    print(f'v{c["version"]} {c["occurred_at"]} {c["action"]:<24} status={after["status"]:<12} staff={after.get("staff_id") or "-"}  by {c["actor"]}')
PY
call GET "/v1/service-requests/$REQUEST" 200

echo
echo "Walk-through done: request $REQUEST -> order $ORDER (completed) -> schedule $SCHEDULE (done)."
