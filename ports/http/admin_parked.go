package httpport

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"hearth/app/ops"
)

// ParkedAggregates is the operator's view of parked aggregates
// (projector.Parking). Replay and Skip record themselves in the audit log, in
// their own transaction, as done by "by".
type ParkedAggregates interface {
	List(ctx context.Context, projection string) ([]ops.ParkedAggregate, error)
	Get(ctx context.Context, projection, streamID string) (ops.ParkedAggregate, error)
	Parked(ctx context.Context, projection, merchantID, streamID string) (ops.ParkedAggregate, bool, error)
	Replay(ctx context.Context, projection, streamID, by string) (ops.ReplayResult, error)
	ReplayAll(ctx context.Context, projection, by string) ([]ops.ReplayResult, error)
	Skip(ctx context.Context, projection, streamID, eventID, by, reason string) (ops.SkipResult, error)
}

// ProjectionRebuilds runs projection rebuilds in the background
// (readmodel.Rebuilds).
type ProjectionRebuilds interface {
	Start(projection string) (ops.RebuildProgress, error)
	Status(projection string) (ops.RebuildProgress, error)
	Cancel(ctx context.Context, projection string) (ops.RebuildProgress, error)
}

// ParkedHeader is set on a detail answer whose row is held behind a parked
// event: "waiting=N, first_version=V, since=RFC 3339".
const ParkedHeader = "Projection-Parked"

// registerOps adds the admin routes of parking and rebuilds (admin keys).

func (s *server) listParked(w http.ResponseWriter, r *http.Request) error {
	list, err := s.Parked.List(r.Context(), r.URL.Query().Get("projection"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": list, "total": len(list)})
	return nil
}

func (s *server) getParked(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	a, err := s.Parked.Get(r.Context(), r.PathValue("projection"), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, a)
	return nil
}

func (s *server) replayParked(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	res, err := s.Parked.Replay(r.Context(), r.PathValue("projection"), id, principal(r).Subject())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

func (s *server) replayAllParked(w http.ResponseWriter, r *http.Request) error {
	res, err := s.Parked.ReplayAll(r.Context(), r.URL.Query().Get("projection"), principal(r).Subject())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": res, "total": len(res)})
	return nil
}

type skipInput struct {
	EventID string `json:"event_id"`
	Reason  string `json:"reason" text:"multiline"`
}

func (s *server) skipParked(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var in skipInput
	if err := decode(r, &in); err != nil {
		return err
	}
	res, err := s.Parked.Skip(r.Context(), r.PathValue("projection"), id, in.EventID, principal(r).Subject(), in.Reason)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

func (s *server) startRebuild(w http.ResponseWriter, r *http.Request) error {
	p, err := s.Rebuilds.Start(r.PathValue("projection"))
	if err != nil {
		return err
	}
	s.audit(r, ops.ActionRebuildStart, p.Projection, map[string]any{"phase": p.Phase})
	w.Header().Set("Location", "/admin/rebuilds/"+p.Projection)
	writeJSON(w, http.StatusAccepted, p)
	return nil
}

func (s *server) rebuildStatus(w http.ResponseWriter, r *http.Request) error {
	p, err := s.Rebuilds.Status(r.PathValue("projection"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

func (s *server) cancelRebuild(w http.ResponseWriter, r *http.Request) error {
	p, err := s.Rebuilds.Cancel(r.Context(), r.PathValue("projection"))
	if err != nil {
		return err
	}
	s.audit(r, ops.ActionRebuildCancel, p.Projection, map[string]any{"phase": p.Phase, "events": p.Events, "rows": p.Rows})
	writeJSON(w, http.StatusOK, p)
	return nil
}

// parkedHeader wraps a detail handler: when the merchant's row is held
// behind a parked event, a successful answer carries ParkedHeader, so a
// client can tell that the row is behind its events.
func (s *server) parkedHeader(projection string, h handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		if s.Parked == nil {
			return h(w, r)
		}
		id, err := pathID(r)
		if err != nil {
			return h(w, r)
		}
		a, parked, err := s.Parked.Parked(r.Context(), projection, principal(r).MerchantID, id)
		if err != nil {
			s.log.WarnContext(r.Context(), "parked check failed", "projection", projection, "id", id, "error", err)
		}
		if !parked {
			return h(w, r)
		}
		value := fmt.Sprintf("waiting=%d, first_version=%d, since=%s", a.Waiting, a.FirstVersion, a.Since.UTC().Format(time.RFC3339))
		return h(&headerOnOK{ResponseWriter: w, name: ParkedHeader, value: value}, r)
	}
}

// headerOnOK sets one header when the answer is 200.
type headerOnOK struct {
	http.ResponseWriter
	name, value string
	wrote       bool
}

func (w *headerOnOK) WriteHeader(code int) {
	if !w.wrote && code == http.StatusOK {
		w.Header().Set(w.name, w.value)
	}
	w.wrote = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *headerOnOK) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}
