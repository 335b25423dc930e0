package refdata

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"hearth/domain/event"
)

// NoteUse records that a key was used now. It only touches memory (a map
// under a mutex), so it is cheap enough for every request and safe for
// concurrent use; FlushUses writes the uses to api_keys.last_used_at in
// one statement.
func (s *Store) NoteUse(keyID string) {
	now := time.Now()
	s.usesMu.Lock()
	s.uses[keyID] = now
	s.usesMu.Unlock()
}

// FlushUses writes the uses noted since the last flush, in one statement,
// and returns how many keys it wrote. A failed flush keeps the uses for
// the next one.
func (s *Store) FlushUses(ctx context.Context) (int, error) {
	s.usesMu.Lock()
	pending := s.uses
	s.uses = make(map[string]time.Time, len(pending))
	s.usesMu.Unlock()
	if len(pending) == 0 {
		return 0, nil
	}
	ids := make([]string, 0, len(pending))
	ats := make([]time.Time, 0, len(pending))
	for id, at := range pending {
		ids = append(ids, id)
		ats = append(ats, event.Instant(at))
	}
	// $n and one array per column: a fixed text, prepared once per
	// connection, whatever the number of keys. A later use that another
	// instance already wrote wins.
	_, err := s.db.DB.ExecContext(ctx, `
		UPDATE api_keys AS k SET last_used_at = u.at
		FROM unnest($1::text[]::uuid[], $2::timestamptz[]) AS u(id, at)
		WHERE k.id = u.id AND (k.last_used_at IS NULL OR k.last_used_at < u.at)`, ids, ats)
	if err != nil {
		s.usesMu.Lock()
		for id, at := range pending {
			if later, ok := s.uses[id]; !ok || later.Before(at) {
				s.uses[id] = at
			}
		}
		s.usesMu.Unlock()
		return 0, fmt.Errorf("flush key uses: %w", err)
	}
	return len(pending), nil
}

// RunUseFlusher flushes the noted uses every interval until ctx ends, then
// once more (shutdown), so that no use noted before is lost.
func (s *Store) RunUseFlusher(ctx context.Context, every time.Duration, log *slog.Logger) {
	log = log.With("component", "key_uses")
	flush := func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, err := s.FlushUses(ctx); err != nil {
			log.WarnContext(ctx, "flushing key uses failed; retrying at the next flush", "error", err)
		}
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			flush(context.WithoutCancel(ctx))
			return
		case <-t.C:
			flush(ctx)
		}
	}
}
