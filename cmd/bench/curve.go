package main

import (
	"context"
	"fmt"
	"runtime"
	"time"
)

// The latency curve: one Hearth in mode all, whose merchant has one webhook
// endpoint (the webhooks run's set-up), takes orders at each of curveRates
// in turn, for curveFor after latencyWarmUp; each order's commit is timed
// to readable in the orders read model (append-to-visible) and to the
// receiver (webhook delivery), the same events for both.
var (
	curveRates = []int{200, 1000, 2000}
	curveFor   = 15 * time.Second
)

// curveTargetRate is the rate whose append-to-visible p99 has a target,
// curveTarget.
const (
	curveTargetRate = 1000
	curveTarget     = 10 * time.Millisecond
)

func (b *bench) curve(ctx context.Context) ([]row, error) {
	h, err := b.startHooks(ctx, "curve")
	if err != nil {
		return nil, err
	}
	defer h.close()
	var rows []row
	for _, r := range curveRates {
		b.progress("latency curve: %d events/s for %s after %s of warm-up, to the read model and one webhook receiver", r, curveFor, latencyWarmUp)
		visible, hook, cpu, took, err := h.latency(ctx, r, curveFor)
		if err != nil {
			return nil, fmt.Errorf("at %d events/s: %w", r, err)
		}
		b.sampleRSS(h.cmd)
		// What each event cost, and how busy the machine was: past a rate
		// the cores are all busy, and the latency is queueing.
		ticks := cpu.process + cpu.postgres + cpu.bench
		note := fmt.Sprintf("one Hearth in mode all; %.0f events/s made; the merchant has one webhook endpoint, its deliveries of the same events in the next row. "+
			"CPU per event: %s (it is the receiver too); %.1f of %d cores busy",
			float64(len(visible))/curveFor.Seconds(), cpu.per(float64(len(visible))),
			float64(ticks)/clockTicks/took.Seconds(), runtime.NumCPU())
		if r == curveTargetRate {
			note += fmt.Sprintf("; target p99 <= %s: %s", ms(curveTarget), metOrNot(visible.pct(0.99) <= curveTarget))
		}
		rows = append(rows,
			row{fmt.Sprintf("latency curve: append-to-visible at %d events/s, %s (p50 / p99 / max)", r, curveFor), visible.String(), "", note},
			row{fmt.Sprintf("latency curve: webhook delivery, commit to receiver, at %d events/s, %s (p50 / p99 / max)", r, curveFor), hook.String(), "",
				"the same events as the row above"})
	}
	return rows, nil
}

// metOrNot says whether a target was met.
func metOrNot(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}
