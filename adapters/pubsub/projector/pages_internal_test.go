package projector

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
)

// fakeRows returns n rows whose offsets follow from.
func fakeRows(from int64, n int) []wsql.Row {
	rows := make([]wsql.Row, n)
	for i := range rows {
		rows[i] = wsql.Row{Offset: from + int64(i) + 1, ExtraData: map[string]any{"transaction_id": int64(7)}}
	}
	return rows
}

// A full page is read once for every consumer that asks for it, also
// while its read is in flight; a short page, a failed read and pages
// beyond maxPages are read again.
func TestPagesShareFullPagesOnly(t *testing.T) {
	ctx := context.Background()
	p := NewPages()
	reads := 0
	read := func(rows []wsql.Row, err error) func() ([]wsql.Row, error) {
		return func() ([]wsql.Row, error) { reads++; return rows, err }
	}
	at := pubsub.Position{TransactionID: 7, Offset: 0}

	got, err := p.read(ctx, "orders", at, 5, read(fakeRows(0, 5), nil))
	require.NoError(t, err)
	require.Len(t, got, 5)
	again, err := p.read(ctx, "orders", at, 5, read(nil, errors.New("must not be read")))
	require.NoError(t, err)
	require.Equal(t, got, again)
	require.Equal(t, 1, reads)

	other, err := p.read(ctx, "schedules", at, 5, read(fakeRows(0, 5), nil))
	require.NoError(t, err)
	require.Len(t, other, 5)
	require.Equal(t, 2, reads, "another topic's page is another page")

	short := pubsub.Position{TransactionID: 7, Offset: 5}
	_, _ = p.read(ctx, "orders", short, 5, read(fakeRows(5, 2), nil))
	_, _ = p.read(ctx, "orders", short, 5, read(fakeRows(5, 3), nil))
	require.Equal(t, 4, reads, "a short page may grow: it is read again")

	failed := pubsub.Position{TransactionID: 7, Offset: 50}
	_, err = p.read(ctx, "orders", failed, 5, read(nil, errors.New("boom")))
	require.Error(t, err)
	got, err = p.read(ctx, "orders", failed, 5, read(fakeRows(50, 5), nil))
	require.NoError(t, err)
	require.Len(t, got, 5)
	require.Equal(t, 6, reads, "a failed read is not kept")

	for i := range maxPages {
		_, err := p.read(ctx, "orders", pubsub.Position{TransactionID: 8, Offset: int64(100 * (i + 1))}, 5, read(fakeRows(0, 5), nil))
		require.NoError(t, err)
	}
	reads = 0
	_, err = p.read(ctx, "orders", at, 5, read(fakeRows(0, 5), nil))
	require.NoError(t, err)
	require.Equal(t, 1, reads, "the oldest page was evicted")
	read8, shared := p.Stats()
	require.Equal(t, int64(6+maxPages+1), read8)
	require.Equal(t, int64(1), shared)
}

// Consumers asking for the same page at once wait for one read.
func TestPagesReadOncePerConcurrentConsumers(t *testing.T) {
	p := NewPages()
	release := make(chan struct{})
	var mu sync.Mutex
	reads := 0
	readFn := func() ([]wsql.Row, error) {
		mu.Lock()
		reads++
		mu.Unlock()
		<-release
		return fakeRows(0, 4), nil
	}
	const consumers = 5
	var wg sync.WaitGroup
	results := make([][]wsql.Row, consumers)
	for i := range consumers {
		wg.Go(func() {
			rows, err := p.read(context.Background(), "orders", pubsub.Position{}, 4, readFn)
			require.NoError(t, err, strconv.Itoa(i))
			results[i] = rows
		})
	}
	// The read is released once it is in flight: consumers that came
	// meanwhile wait for it, later ones find the page kept.
	for {
		read, _ := p.Stats()
		p.mu.Lock()
		_, held := p.pages[pageKey{topic: "orders", size: 4}]
		p.mu.Unlock()
		if read == 1 && held {
			break
		}
	}
	close(release)
	wg.Wait()
	require.Equal(t, 1, reads)
	for _, rows := range results {
		require.Len(t, rows, 4)
	}
	read, shared := p.Stats()
	require.Equal(t, int64(1), read)
	require.Equal(t, int64(consumers-1), shared)
}
