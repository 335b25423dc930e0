package leader

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Term is a fencing term as TermDB records it: the last one begun, by
// whichever instance.
type Term struct {
	Term   int64
	Holder string
	Since  time.Time
}

// CurrentTerm reads the current term of the elector's lock from TermDB;
// ok is false while no instance has begun one.
func (e *Elector) CurrentTerm(ctx context.Context) (t Term, ok bool, err error) {
	err = e.cfg.TermDB.QueryRowContext(ctx, `SELECT term, holder, since FROM projection_leader WHERE name = $1`, e.cfg.Name).
		Scan(&t.Term, &t.Holder, &t.Since)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return Term{}, false, nil
	case err != nil:
		return Term{}, false, fmt.Errorf("read current term: %w", err)
	}
	return t, true, nil
}
