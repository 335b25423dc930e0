package projector

import (
	"context"
	"database/sql"
	"fmt"
)

// Lag is one projection's lag behind its topic: the messages its consumer
// group has not acknowledged, and the age of the oldest in seconds (the
// figures of hearth_projection_lag_events and _seconds).
type Lag struct {
	Projection string
	Events     int64
	Seconds    float64
}

// Lags reads the lag of each projection from the event-store database db.
func Lags(ctx context.Context, db *sql.DB, projections ...Projection) ([]Lag, error) {
	out := make([]Lag, 0, len(projections))
	for _, p := range projections {
		events, seconds, err := lag(ctx, db, p)
		if err != nil {
			return nil, fmt.Errorf("lag of %s: %w", p.Name, err)
		}
		out = append(out, Lag{Projection: p.Name, Events: events, Seconds: seconds})
	}
	return out, nil
}
