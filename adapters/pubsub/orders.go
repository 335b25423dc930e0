package pubsub

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"

	"hearth/app/apperr"
	"hearth/app/command"
	"hearth/app/event"
	"hearth/app/order"
)

// OrderStream is where orders live.
var OrderStream = Stream{Type: order.StreamType, Topic: TopicOrders, Decode: order.Decode}

// OrderRepository implements command.OrderRepository on the event store.
type OrderRepository struct {
	store *Store
}

// NewOrderRepository returns the order repository.
func NewOrderRepository(store *Store) (OrderRepository, error) {
	if store == nil {
		return OrderRepository{}, fmt.Errorf("pubsub.NewOrderRepository: nil store")
	}
	return OrderRepository{store: store}, nil
}

// Create appends a new order's events.
func (r OrderRepository) Create(ctx context.Context, meta event.Meta, o *order.Order) (command.Written, error) {
	var w command.Written
	err := r.store.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		recs, pos, err := r.store.Append(ctx, tx, OrderStream, meta, o.ID(), 0, o.Changes())
		w = command.Written{Stream: recs, Appended: len(recs), Position: pos}
		return err
	})
	if err != nil {
		return command.Written{}, err
	}
	return w, nil
}

// Update loads the order, lets fn decide and appends what it decided.
func (r OrderRepository) Update(ctx context.Context, meta event.Meta, id string, expectedVersion *int, fn func(o *order.Order) error) (command.Written, error) {
	var w command.Written
	err := r.store.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		stream, pos, err := r.store.Load(ctx, tx.Tx, OrderStream, meta.MerchantID, id)
		if err != nil {
			return err
		}
		events := make([]event.Event, len(stream))
		for i, rec := range stream {
			events[i] = rec.Event
		}
		o, err := order.Rehydrate(events)
		if err != nil {
			return fmt.Errorf("order %s: %w", id, err)
		}
		if expectedVersion != nil && *expectedVersion != o.Version() {
			return &apperr.ConflictError{Detail: fmt.Sprintf("order %s is at version %d, not %d; read it again and retry", id, o.Version(), *expectedVersion)}
		}
		if err := fn(o); err != nil {
			return err
		}
		recs, newPos, err := r.store.Append(ctx, tx, OrderStream, meta, id, o.Version(), o.Changes())
		if err != nil {
			return err
		}
		w = command.Written{Stream: append(stream, recs...), Appended: len(recs), Position: max(pos, newPos)}
		return nil
	})
	if err != nil {
		return command.Written{}, err
	}
	return w, nil
}
