package readmodel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"hearth/domain/apperr"
	"hearth/internal/aggregates"
)

// Positions tells whether the read models reflect a write.
//
// A write answers with the position of its last event. Positions are
// assigned in insertion order, not commit order, so "every event below P
// is applied" would be wrong (an earlier position may commit later) and
// costly. Instead: the read models have reached P when every event written
// by P's transaction is reflected in its aggregate's row, that is, the row's
// version is at least the event's. It is exact for the write that returned
// P, and costs one indexed query on the event store (once per wait) and one
// primary-key read per aggregate the write touched (per check).
type Positions struct {
	es, rm *bun.DB
	events bool // OnEventStore
}

// OnEventStore makes p check the write's streams that have no read-model
// row (a data subject's own: customer.erased) too, by their events on rm,
// which must hold the event store's database as well. For a replica of
// that database, whose reference data the GET reads after the wait: on the
// primary, the commit that appended those events changed the reference
// data at once (an erasure empties the record in it), so there is nothing
// to wait for; a replica shows the change only once it has replayed that
// commit, which its copy of the events tells.
func (p *Positions) OnEventStore() *Positions {
	p.events = true
	return p
}

// NewPositions returns the checker on the event store and the read model.
func NewPositions(es, rm *bun.DB) (*Positions, error) {
	if es == nil || rm == nil {
		return nil, errors.New("readmodel.NewPositions: nil db")
	}
	return &Positions{es: es, rm: rm}, nil
}

type streamVersion struct {
	StreamType string `bun:"stream_type"`
	StreamID   string `bun:"stream_id"`
	Version    int    `bun:"version"`
}

// Wait waits until the read models have reached position, a write of the
// merchant, or ctx ends. It reports whether they have. A position that is
// not an event of the merchant (another merchant's, or none: a rolled-back
// write, a guess) is apperr.ErrNotFound, the same in both cases.
func (p *Positions) Wait(ctx context.Context, merchantID string, position int64) (bool, error) {
	var streams []streamVersion
	err := p.es.NewRaw(`
		SELECT stream_type, stream_id::text AS stream_id, max(version) AS version FROM events
		WHERE transaction_id = (SELECT transaction_id FROM events WHERE position = ? AND merchant_id::text = ?)
		GROUP BY 1, 2`, position, merchantID).Scan(ctx, &streams)
	if err != nil {
		if ctx.Err() != nil {
			return false, nil
		}
		return false, fmt.Errorf("events of position %d: %w", position, err)
	}
	if len(streams) == 0 {
		return false, apperr.ErrNotFound
	}
	wait := time.Millisecond
	for {
		reached, err := p.reached(ctx, &streams)
		if ctx.Err() != nil {
			return false, nil
		}
		if err != nil || reached {
			return reached, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, nil
		case <-t.C:
		}
		wait = min(wait*2, 25*time.Millisecond)
	}
}

// reached checks the streams not yet seen at their version, and drops
// those that are.
func (p *Positions) reached(ctx context.Context, streams *[]streamVersion) (bool, error) {
	for len(*streams) > 0 {
		s := (*streams)[0]
		if agg, ok := aggregates.ByType(s.StreamType); ok {
			var ok bool
			err := p.rm.NewRaw(`SELECT EXISTS (SELECT 1 FROM ? WHERE id = ? AND version >= ?)`,
				bun.Ident(agg.Table), s.StreamID, s.Version).Scan(ctx, &ok)
			if err != nil {
				return false, fmt.Errorf("version of %s %s: %w", s.StreamType, s.StreamID, err)
			}
			if !ok {
				return false, nil
			}
		} else if p.events {
			var ok bool
			err := p.rm.NewRaw(`SELECT EXISTS (SELECT 1 FROM events WHERE stream_id = ? AND version = ?)`,
				s.StreamID, s.Version).Scan(ctx, &ok)
			if err != nil {
				return false, fmt.Errorf("event %d of %s %s: %w", s.Version, s.StreamType, s.StreamID, err)
			}
			if !ok {
				return false, nil
			}
		}
		*streams = (*streams)[1:]
	}
	return true, nil
}
