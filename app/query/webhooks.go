package query

import (
	"context"
	"errors"

	"hearth/domain/webhook"
)

// WebhookReads reads webhook endpoints and their delivery logs
// (adapters/webhooks), limited to one merchant.
type WebhookReads interface {
	Endpoints(ctx context.Context, merchantID string, p Page) ([]webhook.Endpoint, int, error)
	Endpoint(ctx context.Context, merchantID, id string) (webhook.Endpoint, error)
	// Deliveries is a page of the endpoint's log, newest first, of the
	// given statuses (all when none), paged like the other lists (a
	// numbered page or after a cursor, the total counted up to MaxDepth);
	// apperr.ErrNotFound when the merchant has no such endpoint.
	Deliveries(ctx context.Context, merchantID, endpointID string, statuses []string, p Page) (List[webhook.Delivery], error)
	Delivery(ctx context.Context, merchantID, endpointID, id string) (webhook.Delivery, error)
}

// Webhooks answers the reads of webhook endpoints.
type Webhooks struct {
	rm WebhookReads
}

// NewWebhooks checks its dependency.
func NewWebhooks(rm WebhookReads) (Webhooks, error) {
	if rm == nil {
		return Webhooks{}, errors.New("query.NewWebhooks: nil dependency")
	}
	return Webhooks{rm: rm}, nil
}

// Endpoints returns a page of the merchant's endpoints, newest first,
// without their signing secrets (empty): no read shows them.
func (q Webhooks) Endpoints(ctx context.Context, merchantID string, p Page) (List[webhook.Endpoint], error) {
	items, total, err := q.rm.Endpoints(ctx, merchantID, p)
	return newList(items, total, p), err
}

// Endpoint returns one endpoint without its signing secrets, or
// apperr.ErrNotFound.
func (q Webhooks) Endpoint(ctx context.Context, merchantID, id string) (webhook.Endpoint, error) {
	return q.rm.Endpoint(ctx, merchantID, id)
}

// Deliveries returns a page of an endpoint's delivery log, newest first:
// it grows with every event, so it is paged like the other lists.
func (q Webhooks) Deliveries(ctx context.Context, merchantID, endpointID string, statuses []string, p Page) (List[webhook.Delivery], error) {
	return q.rm.Deliveries(ctx, merchantID, endpointID, statuses, p)
}

// Delivery returns one delivery of an endpoint, or apperr.ErrNotFound.
func (q Webhooks) Delivery(ctx context.Context, merchantID, endpointID, id string) (webhook.Delivery, error) {
	return q.rm.Delivery(ctx, merchantID, endpointID, id)
}

// newList is a numbered page of a list whose total is counted exactly (a
// merchant's endpoints: at most webhook.MaxEndpoints).
func newList[T any](items []T, total int, p Page) List[T] {
	if items == nil {
		items = []T{}
	}
	return List[T]{Items: items, Total: total, TotalExact: true, Page: p.Number, PageSize: p.Size}
}
