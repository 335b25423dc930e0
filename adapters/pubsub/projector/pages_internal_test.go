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

// counted returns a read that counts its calls in *n and gives rows, err.
func counted(n *int, rows []wsql.Row, err error) func() ([]wsql.Row, error) {
	return func() ([]wsql.Row, error) { *n++; return rows, err }
}

func at(offset int64) pubsub.Position { return pubsub.Position{TransactionID: 7, Offset: offset} }

// A full page is kept until every consumer of its topic that joined has
// taken it; a short page and a failed read are not kept; another topic's
// page is another page.
func TestPagesKeepAFullPageUntilEveryConsumerHasIt(t *testing.T) {
	ctx := context.Background()
	p := NewPages()
	defer p.Join("orders", "a")()
	defer p.Join("orders", "b")()
	defer p.Join("orders", "c")()
	reads := 0

	got, err := p.read(ctx, "orders", "a", at(0), 5, counted(&reads, fakeRows(0, 5), nil))
	require.NoError(t, err)
	require.Len(t, got, 5)
	again, err := p.read(ctx, "orders", "b", at(0), 5, counted(&reads, nil, errors.New("must not be read")))
	require.NoError(t, err)
	require.Equal(t, got, again)
	require.Equal(t, 1, reads)
	_, err = p.read(ctx, "orders", "c", at(0), 5, counted(&reads, nil, errors.New("must not be read")))
	require.NoError(t, err)
	require.Equal(t, 1, reads)
	require.Empty(t, p.pages, "taken by every consumer: dropped")

	_, err = p.read(ctx, "schedules", "a", at(0), 5, counted(&reads, fakeRows(0, 5), nil))
	require.NoError(t, err)
	require.Equal(t, 2, reads, "another topic's page is another page")
	require.Empty(t, p.pages, "no consumer of schedules joined: nothing to keep it for")

	_, _ = p.read(ctx, "orders", "a", at(5), 5, counted(&reads, fakeRows(5, 2), nil))
	_, _ = p.read(ctx, "orders", "b", at(5), 5, counted(&reads, fakeRows(5, 3), nil))
	require.Equal(t, 4, reads, "a short page may grow: it is read again")

	_, err = p.read(ctx, "orders", "a", at(50), 5, counted(&reads, nil, errors.New("boom")))
	require.Error(t, err)
	got, err = p.read(ctx, "orders", "b", at(50), 5, counted(&reads, fakeRows(50, 5), nil))
	require.NoError(t, err)
	require.Len(t, got, 5)
	require.Equal(t, 6, reads, "a failed read is not kept")

	read, shared := p.Stats()
	require.Equal(t, int64(6), read)
	require.Equal(t, int64(2), shared)
}

// A consumer ahead of the others fills the cache: its next pages are not
// kept, and the pages the others are about to ask for stay until they
// have them. A consumer that leaves no longer holds pages back.
func TestPagesKeepWhatTheSlowerConsumersNeed(t *testing.T) {
	ctx := context.Background()
	p := NewPages()
	defer p.Join("orders", "fast")()
	leaveSlow := p.Join("orders", "slow")
	reads := 0
	for i := range maxPages + 2 {
		_, err := p.read(ctx, "orders", "fast", at(int64(5*i)), 5, counted(&reads, fakeRows(int64(5*i), 5), nil))
		require.NoError(t, err)
	}
	require.Equal(t, maxPages+2, reads)
	require.Len(t, p.pages, maxPages)
	for i := range maxPages + 2 {
		_, err := p.read(ctx, "orders", "slow", at(int64(5*i)), 5, counted(&reads, fakeRows(int64(5*i), 5), nil))
		require.NoError(t, err)
	}
	require.Equal(t, maxPages+4, reads, "the first pages shared, the last two read again")
	require.Empty(t, p.pages)

	_, err := p.read(ctx, "orders", "fast", at(100), 5, counted(&reads, fakeRows(100, 5), nil))
	require.NoError(t, err)
	require.Len(t, p.pages, 1, "kept for slow")
	leaveSlow()
	require.Empty(t, p.pages, "slow left: nobody needs it")
}

// Consumers asking for the same page at once wait for one read.
func TestPagesReadOncePerConcurrentConsumers(t *testing.T) {
	p := NewPages()
	const consumers = 5
	for i := range consumers {
		defer p.Join("orders", strconv.Itoa(i))()
	}
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
	var wg sync.WaitGroup
	results := make([][]wsql.Row, consumers)
	for i := range consumers {
		wg.Go(func() {
			rows, err := p.read(context.Background(), "orders", strconv.Itoa(i), pubsub.Position{}, 4, readFn)
			require.NoError(t, err, strconv.Itoa(i))
			results[i] = rows
		})
	}
	// The read is released once it is in flight: consumers that came
	// meanwhile wait for it, later ones find the page kept.
	for {
		read, _ := p.Stats()
		if read == 1 {
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
	require.Empty(t, p.pages)
}
