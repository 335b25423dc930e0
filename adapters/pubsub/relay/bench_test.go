package relay_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub/relay"
	"hearth/internal/advisory"
	"hearth/internal/pgtest"
)

// BenchmarkRelay relays one backlog of about 20,000 events, written by 16
// writers at once (aggregates interleaved as under load), to a local NATS
// server: once per window, each time into a new stream from the start of
// the topics. Window 1 is the relay of before, one acknowledgement after
// another. Reported: events/s, from Run's start to the last event
// acknowledged.
func BenchmarkRelay(b *testing.B) {
	f := setup(b, pgtest.NewDB(b))
	const writers, perWriter = 16, 370 // 16×370 aggregates: 4 events per order, 1 per request
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for range writers {
		wg.Go(func() {
			w := &writer{f: f}
			for i := range perWriter {
				if err := w.one(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	require.NoError(b, <-errs)
	events := len(f.storedEvents(b))
	_, err := f.RM.DB.Exec(`INSERT INTO projection_leader (name, term, holder, since) VALUES ($1, 1, 'bench', now())`, advisory.Relay)
	require.NoError(b, err)

	runs := 0
	for _, window := range []int{1, 16, relay.Window} {
		b.Run(fmt.Sprintf("window=%d", window), func(b *testing.B) {
			for b.Loop() {
				runs++
				_, err := f.RM.DB.Exec(`DELETE FROM relay_offsets`)
				require.NoError(b, err)
				reg := prometheus.NewRegistry()
				cfg := f.config()
				cfg.Metrics, err = relay.NewMetrics(reg)
				require.NoError(b, err)
				cfg.Stream, cfg.SubjectPrefix, cfg.Window, cfg.PageSize = fmt.Sprintf("BENCH_%d", runs), fmt.Sprintf("bench%d", runs), window, 0
				r, err := relay.New(cfg)
				require.NoError(b, err)
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				start := time.Now()
				go func() { done <- r.Run(ctx, 1) }()
				// The relay's count of acknowledgements, polled in the process:
				// a poll of the server's would load the server being measured.
				for gatherSum(b, reg, "hearth_relay_published_total") < float64(events) {
					time.Sleep(time.Millisecond)
				}
				elapsed := time.Since(start)
				cancel()
				require.NoError(b, <-done)
				info, err := f.js.StreamInfo(cfg.Stream)
				require.NoError(b, err)
				require.Equal(b, uint64(events), info.State.Msgs, "each event once")
				b.ReportMetric(float64(events)/elapsed.Seconds(), "events/s")
			}
		})
	}
}
