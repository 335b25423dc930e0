package projector

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"hearth/domain/event"
)

// Skips knows the events an operator skipped in each projection
// (skipped_events, Parking.Skip), so that a projection applies such an
// event as skipped (event.Skipped) every time it reads it, as verify,
// rebuild, replay, the event feed and the relay do. A projection meets a
// skipped event again when it reads its topic again: a read model restored
// from a backup taken before the skip, its projections rewound (the
// runbook's restore). Applied as itself there, the event would show what
// the skip left out, or park the aggregate again, and its change-log row
// would name its type where verify expects "skipped", which no rebuild
// mends (a rebuild keeps the change log).
//
// The set is read again at most every anyParkedTTL. A skip recorded since
// the last read needs no notice: the skip applies the event as skipped
// itself, so this projection meets it only as already applied (the
// version guard), until a rewind, which needs every worker stopped, and a
// process that starts reads the set afresh.
type Skips struct {
	db    *sql.DB
	mu    sync.Mutex
	state map[string]skipsState
}

type skipsState struct {
	ids map[string]bool
	at  time.Time
}

// NewSkips returns the skipped events of the event-store database db.
func NewSkips(db *sql.DB) *Skips { return &Skips{db: db, state: map[string]skipsState{}} }

// of returns the ids of the events skipped in projection. A nil Skips
// knows none.
func (s *Skips) of(ctx context.Context, projection string) (map[string]bool, error) {
	if s == nil {
		return nil, nil
	}
	s.mu.Lock()
	st, ok := s.state[projection]
	s.mu.Unlock()
	if ok && time.Since(st.at) < anyParkedTTL {
		return st.ids, nil
	}
	at := time.Now()
	rows, err := s.db.QueryContext(ctx, `SELECT event_id FROM skipped_events WHERE projection = $1`, projection)
	if err != nil {
		return nil, fmt.Errorf("read the events skipped in %s: %w", projection, err)
	}
	defer rows.Close()
	ids := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("read the events skipped in %s: %w", projection, err)
		}
		ids[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the events skipped in %s: %w", projection, err)
	}
	s.mu.Lock()
	s.state[projection] = skipsState{ids: ids, at: at}
	s.mu.Unlock()
	return ids, nil
}

// unmarshal decodes a message of p's topic as p applies it: an event in
// skipped (the ids of) comes back as event.Skipped without its data being
// decoded (it often does not decode: that may be why it was skipped).
func unmarshal(payload []byte, p Projection, skipped map[string]bool) (event.Recorded, error) {
	if len(skipped) == 0 {
		return event.Unmarshal(payload, p.Decode)
	}
	env, err := event.Unmarshal(payload, envelopeOnly)
	if err != nil {
		return env, err
	}
	if skipped[env.ID] {
		return event.Skip(env), nil
	}
	return event.Unmarshal(payload, p.Decode)
}
