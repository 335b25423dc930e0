package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"
)

// The tracing run: what tracing costs on the write path, beside the same
// binary with tracing off in the same run.
var (
	tracingRounds = 4
	tracingTurn   = 5 * time.Second
)

// tracing: POST /v1/orders at concurrency 16 to two Hearth processes in
// mode api on one database, one tracing every request (OTLP over HTTP to a
// receiver in the bench process that reads each export and answers 200,
// sampler always_on) and one with tracing off, taking turns as the sealing
// run does (alternate). CPU from /proc over each turn, divided by the
// requests that succeeded; the receiver's CPU counts as the load
// generator's.
func (b *bench) tracing(ctx context.Context) ([]row, error) {
	es, url, key, customerID, err := b.operatorDB(ctx, "tracing")
	if err != nil {
		return nil, err
	}
	defer es.Close()
	var exports, bytes atomic.Int64
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/v1/traces" {
			exports.Add(1)
			bytes.Add(n)
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer receiver.Close()
	request := postOrderRequest(key.Secret, customerID)

	traced, tracedBase, err := b.start(ctx, hearthRun{name: "tracing, on", url: url, mode: "api",
		env: []string{"OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_ENDPOINT=" + receiver.URL, "OTEL_TRACES_SAMPLER=always_on"}})
	if err != nil {
		return nil, err
	}
	defer b.stopHearth(traced)
	plain, plainBase, err := b.start(ctx, hearthRun{name: "tracing, off", url: url, mode: "api", env: []string{"OTEL_TRACES_EXPORTER=none"}})
	if err != nil {
		return nil, err
	}
	defer b.stopHearth(plain)
	onRun, offRun := &contender{base: tracedBase, pid: traced.Process.Pid}, &contender{base: plainBase, pid: plain.Process.Pid}
	b.alternate("tracing", request, tracingRounds, tracingTurn, onRun, offRun)
	b.sampleRSS(traced)
	b.sampleRSS(plain)
	if exports.Load() == 0 {
		return nil, fmt.Errorf("the traced Hearth exported no spans to the receiver at %s", receiver.URL)
	}
	on, off := onRun.total, offRun.total
	onCPU, offCPU := on.cpu.per(float64(len(on.lat))), off.cpu.per(float64(len(off.lat)))
	return []row{{
		fmt.Sprintf("POST /v1/orders, mode api, concurrency %d, %d turns of %s each, tracing on (OTLP/HTTP, always_on) / off", concurrency, tracingRounds, tracingTurn),
		fmt.Sprintf("%s; %s", on, onCPU), fmt.Sprintf("%s; %s", off, offCPU),
		fmt.Sprintf("**Hearth's CPU per request %s with every request traced**, rate %s. Plain: the same binary with tracing off (OTEL_TRACES_EXPORTER=none), "+
			"the two taking turns on one database. %d exports, %.1f MB, reached the receiver. Hearth µs per request by turn: traced %s, off %s",
			change(onCPU.process, offCPU.process), change(on.perSecond(), off.perSecond()), exports.Load(), float64(bytes.Load())/1e6,
			strings.Join(onRun.turns, ", "), strings.Join(offRun.turns, ", ")),
	}}, nil
}
