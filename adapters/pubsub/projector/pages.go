package projector

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"

	"hearth/adapters/pubsub"
)

// Pages lets the consumers of a topic in one process share the pages they
// catch up on. After a worker was down, every consumer group of a topic
// (its projection, the webhook fan-out, the relay) starts from the same
// place and reads the same pages; each read is a scan of a page of rows
// that Postgres answers on the same cores as the consumers, and each page
// is then parsed again. Pages reads a page once, for the first consumer
// that asks, and hands the same rows to the others that ask for the page
// after the same position.
//
// A shared page is as good as one of the consumer's own: a page is the
// messages after a position, in delivery order, below pg_snapshot_xmin
// when it was read, and no message committed later can come before its
// last one. Only full pages are kept (a short one may grow, and an empty
// one must be read again). A page is dropped once every consumer of its
// topic that has joined (Join) has taken it, and at most maxPages are
// kept: while that many wait for slower consumers, a faster one's new
// pages are not kept (the slower ones read those themselves, as without
// Pages), rather than dropping the pages the slower ones are about to ask
// for. Each consumer still checks its own position for a retention gap
// (pubsub.CheckGap).
//
// The zero value is not usable; use NewPages. A nil *Pages shares nothing.
type Pages struct {
	mu        sync.Mutex
	pages     map[pageKey]*page
	consumers map[string]map[string]*consumer // topic → group

	reads, shared atomic.Int64 // pages read, pages handed on (Stats)
}

// Stats returns how many pages the consumers read themselves, and how many
// they took from another's read.
func (p *Pages) Stats() (read, shared int64) { return p.reads.Load(), p.shared.Load() }

// maxPages bounds the pages kept, across topics: a page is about a
// megabyte of payloads, and the heap is bounded (see CatchUpPageSize).
const maxPages = 4

// consumer is a group that joined a topic.
type consumer struct {
	joins int
	past  pubsub.Position // the end of the last page it had: it needs no page before
}

type pageKey struct {
	topic string
	after pubsub.Position
	size  int
}

type page struct {
	done  chan struct{} // closed once rows or err is set
	rows  []wsql.Row
	err   error
	taken map[string]bool // the groups that have the page; under Pages.mu
}

// NewPages returns an empty page cache for one process.
func NewPages() *Pages {
	return &Pages{pages: map[pageKey]*page{}, consumers: map[string]map[string]*consumer{}}
}

// Join records group as a consumer of topic until leave is called: the
// pages of topic are kept for it until it has taken them.
func (p *Pages) Join(topic, group string) (leave func()) {
	if p == nil {
		return func() {}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.consumers[topic] == nil {
		p.consumers[topic] = map[string]*consumer{}
	}
	c := p.consumers[topic][group]
	if c == nil {
		c = &consumer{}
		p.consumers[topic][group] = c
	}
	c.joins++
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if c.joins--; c.joins <= 0 {
				delete(p.consumers[topic], group)
			}
			for key, pg := range p.pages {
				if key.topic == topic {
					p.dropIfTakenLocked(key, pg)
				}
			}
		})
	}
}

// read returns group's page of topic after position after, of size rows at
// most, reading it with readFn unless another consumer has or is reading
// it. The rows are shared: callers must not modify them.
func (p *Pages) read(ctx context.Context, topic, group string, after pubsub.Position, size int, readFn func() ([]wsql.Row, error)) ([]wsql.Row, error) {
	if p == nil {
		return readFn()
	}
	readOwn := func() ([]wsql.Row, error) {
		p.reads.Add(1)
		return readFn()
	}
	key := pageKey{topic: topic, after: after, size: size}
	p.mu.Lock()
	if pg, ok := p.pages[key]; ok {
		p.mu.Unlock()
		select {
		case <-pg.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if pg.err != nil {
			return readOwn() // the reader failed (its own context, perhaps): read again
		}
		p.shared.Add(1)
		p.mu.Lock()
		pg.taken[group] = true
		p.passedLocked(topic, group, pg.rows)
		p.dropIfTakenLocked(key, pg)
		p.mu.Unlock()
		return pg.rows, nil
	}
	pg := &page{done: make(chan struct{}), taken: map[string]bool{group: true}}
	p.pages[key] = pg
	p.mu.Unlock()

	pg.rows, pg.err = readOwn()
	close(pg.done)
	p.mu.Lock()
	p.passedLocked(topic, group, pg.rows)
	if pg.err != nil || len(pg.rows) < size || p.full() {
		p.drop(key, pg)
	} else {
		p.dropIfTakenLocked(key, pg)
	}
	p.mu.Unlock()
	return pg.rows, pg.err
}

// full reports whether maxPages pages are kept; p.mu is held.
func (p *Pages) full() bool {
	kept := 0
	for _, pg := range p.pages {
		select {
		case <-pg.done:
			kept++
		default: // a read in flight
		}
	}
	return kept > maxPages
}

// dropIfTakenLocked drops the page at key once every group that has joined
// its topic has it; p.mu is held.
func (p *Pages) dropIfTakenLocked(key pageKey, pg *page) {
	select {
	case <-pg.done:
	default:
		return // still being read
	}
	for group, c := range p.consumers[key.topic] {
		if !pg.taken[group] && !before(key.after, c.past) {
			return
		}
	}
	p.drop(key, pg)
}

// passedLocked records that group of topic has had rows (none: nothing);
// p.mu is held. Pages before their end are no longer kept for it, such
// as those it read itself while the cache was full.
func (p *Pages) passedLocked(topic, group string, rows []wsql.Row) {
	c := p.consumers[topic][group]
	if c == nil || len(rows) == 0 {
		return
	}
	if end := positionOf(rows[len(rows)-1]); before(c.past, end) {
		c.past = end
	}
	for key, pg := range p.pages {
		if key.topic == topic {
			p.dropIfTakenLocked(key, pg)
		}
	}
}

// before reports whether a comes before b in delivery order.
func before(a, b pubsub.Position) bool {
	return a.TransactionID < b.TransactionID || a.TransactionID == b.TransactionID && a.Offset < b.Offset
}

// drop forgets the page at key, when it is still pg; p.mu is held.
func (p *Pages) drop(key pageKey, pg *page) {
	if p.pages[key] == pg {
		delete(p.pages, key)
	}
}

// ReadAfter reads the page of topic after position pos, of size messages
// at most, exactly as Hearth's subscribers would (their order and query,
// pubsub.KeysetSchema, the pg_snapshot_xmin rule) but in one statement,
// without holding a transaction, sharing it through pages (nil: no
// sharing). The catch-up reads with it, and so does the relay
// (adapters/pubsub/relay), whose position lives in the read model. After
// the page it checks that retention deleted nothing after pos that group
// has not consumed (pubsub.CheckGap): a *pubsub.TopicGapError then, and no
// page, so that no consumer skips a gap. The rows may be shared: the
// caller must not modify them.
func ReadAfter(ctx context.Context, db *sql.DB, pages *Pages, topic, group string, pos pubsub.Position, size int) ([]wsql.Row, error) {
	schema := wsql.DefaultPostgreSQLSchema{SubscribeBatchSize: size}
	rows, err := pages.read(ctx, topic, group, pos, size, func() ([]wsql.Row, error) {
		return readPage(ctx, db, schema, after{pos: pos}, topic, group)
	})
	if err != nil {
		return nil, err
	}
	if err := pubsub.CheckGap(ctx, db, topic, group, after{pos: pos}.NextOffsetQuery(topic, group)); err != nil {
		return nil, err
	}
	return rows, nil
}

// position reads group's position in topic, where its next page starts.
func position(ctx context.Context, db *sql.DB, topic, group string) (pubsub.Position, error) {
	next := LockFreeOffsets{}.NextOffsetQuery(topic, group)
	var pos pubsub.Position
	err := db.QueryRowContext(ctx, `SELECT coalesce(offset_acked, 0), coalesce(last_processed_transaction_id, '0')::text::bigint
		FROM (`+next.Query+`) AS last_processed`, next.Args...).Scan(&pos.Offset, &pos.TransactionID)
	if err != nil {
		return pubsub.Position{}, fmt.Errorf("read the position of %s in %s: %w", group, topic, err)
	}
	return pos, nil
}

// after is an offsets adapter whose next read starts after a position
// known beforehand (the page before's last message), instead of the
// group's stored one.
type after struct {
	LockFreeOffsets
	pos pubsub.Position
}

func (a after) NextOffsetQuery(string, string) wsql.Query {
	return wsql.Query{
		Query: `SELECT $1::bigint AS offset_acked, $2::bigint::text::xid8 AS last_processed_transaction_id`,
		Args:  []any{a.pos.Offset, int64(a.pos.TransactionID)},
	}
}

// positionOf is the position of row, a message read from a topic table.
func positionOf(row wsql.Row) pubsub.Position {
	txid, _ := row.ExtraData["transaction_id"].(int64)
	return pubsub.Position{TransactionID: uint64(txid), Offset: row.Offset}
}
