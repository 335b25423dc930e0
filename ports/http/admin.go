package httpport

import (
	"context"
	"net/http"
	"time"
)

// leadership answers this instance's leadership role, term and since when,
// and the current term as the database records it.
func (s *server) leadership(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	out, err := s.Leadership(ctx)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
