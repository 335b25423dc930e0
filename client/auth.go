package client

import (
	"context"
	"net/http"
)

// Bearer authenticates requests with an API key (hk_...): the header
// Authorization: Bearer <key>.
func Bearer(key string) RequestEditorFn {
	return func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer "+key)
		return nil
	}
}
