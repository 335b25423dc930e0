package query

import (
	"context"
	"errors"
	"time"
)

// ReadModel is what the service-request and schedule queries need: one row
// and filtered pages, both limited to scope.
type ReadModel[V, F any] interface {
	Get(ctx context.Context, scope Scope, id string) (V, error)
	List(ctx context.Context, scope Scope, f F, p Page) ([]V, int, error)
}

// ServiceRequestFilter narrows GET /v1/service-requests.
type ServiceRequestFilter struct {
	Statuses   []string
	CustomerID string
	From, To   *time.Time // on appointment_start_at, [From, To)
}

// ScheduleFilter narrows GET /v1/schedules.
type ScheduleFilter struct {
	Statuses []string
	StaffID  string
	From, To *time.Time // on start_at, [From, To)
}

// ServiceRequests answers the service-request reads.
type ServiceRequests struct {
	rm    ReadModel[ServiceRequest, ServiceRequestFilter]
	names Names
}

// NewServiceRequests checks its dependencies.
func NewServiceRequests(rm ReadModel[ServiceRequest, ServiceRequestFilter], names Names) (ServiceRequests, error) {
	if rm == nil || names == nil {
		return ServiceRequests{}, errors.New("query.NewServiceRequests: nil dependency")
	}
	return ServiceRequests{rm: rm, names: names}, nil
}

func (q ServiceRequests) join(ctx context.Context, scope Scope, items []ServiceRequest) error {
	return joinNames(ctx, q.names, scope.MerchantID, items,
		nameField[ServiceRequest]{Customers, func(v *ServiceRequest) *string { return &v.CustomerID }, func(v *ServiceRequest) *string { return &v.CustomerName }},
		nameField[ServiceRequest]{CatalogItems, func(v *ServiceRequest) *string { return v.CatalogItemID }, func(v *ServiceRequest) *string { return &v.CatalogItemName }},
	)
}

// Get returns one request, or apperr.ErrNotFound.
func (q ServiceRequests) Get(ctx context.Context, scope Scope, id string) (ServiceRequest, error) {
	v, err := q.rm.Get(ctx, scope, id)
	if err != nil {
		return v, err
	}
	return q.Named(ctx, scope, v)
}

// Named fills the names a request shows (customer, catalog item).
func (q ServiceRequests) Named(ctx context.Context, scope Scope, v ServiceRequest) (ServiceRequest, error) {
	items := []ServiceRequest{v}
	err := q.join(ctx, scope, items)
	return items[0], err
}

// List returns a page of requests, newest first (by appointment start when
// a time range is given).
func (q ServiceRequests) List(ctx context.Context, scope Scope, f ServiceRequestFilter, p Page) (List[ServiceRequest], error) {
	items, total, err := q.rm.List(ctx, scope, f, p)
	if err == nil {
		err = q.join(ctx, scope, items)
	}
	return newList(items, total, p), err
}

// Schedules answers the schedule reads.
type Schedules struct {
	rm    ReadModel[Schedule, ScheduleFilter]
	names Names
}

// NewSchedules checks its dependencies.
func NewSchedules(rm ReadModel[Schedule, ScheduleFilter], names Names) (Schedules, error) {
	if rm == nil || names == nil {
		return Schedules{}, errors.New("query.NewSchedules: nil dependency")
	}
	return Schedules{rm: rm, names: names}, nil
}

func (q Schedules) join(ctx context.Context, scope Scope, items []Schedule) error {
	return joinNames(ctx, q.names, scope.MerchantID, items,
		nameField[Schedule]{Staff, func(v *Schedule) *string { return &v.StaffID }, func(v *Schedule) *string { return &v.StaffName }},
	)
}

// Get returns one schedule, or apperr.ErrNotFound.
func (q Schedules) Get(ctx context.Context, scope Scope, id string) (Schedule, error) {
	v, err := q.rm.Get(ctx, scope, id)
	if err != nil {
		return v, err
	}
	return q.Named(ctx, scope, v)
}

// Named fills the name a schedule shows (staff).
func (q Schedules) Named(ctx context.Context, scope Scope, v Schedule) (Schedule, error) {
	items := []Schedule{v}
	err := q.join(ctx, scope, items)
	return items[0], err
}

// List returns a page of schedules, newest first (by start when a time
// range is given).
func (q Schedules) List(ctx context.Context, scope Scope, f ScheduleFilter, p Page) (List[Schedule], error) {
	items, total, err := q.rm.List(ctx, scope, f, p)
	if err == nil {
		err = q.join(ctx, scope, items)
	}
	return newList(items, total, p), err
}

// RecordReader reads one kind of reference record of a merchant.
type RecordReader[T any] interface {
	Get(ctx context.Context, merchantID, id string) (T, error)
	List(ctx context.Context, merchantID, q string, p Page) ([]T, int, error)
}

// Records answers the reads of one kind of reference record.
type Records[T any] struct {
	rm RecordReader[T]
}

// NewRecords checks its dependency.
func NewRecords[T any](rm RecordReader[T]) (Records[T], error) {
	if rm == nil {
		return Records[T]{}, errors.New("query.NewRecords: nil read model")
	}
	return Records[T]{rm: rm}, nil
}

// Get returns one record, or apperr.ErrNotFound.
func (q Records[T]) Get(ctx context.Context, merchantID, id string) (T, error) {
	return q.rm.Get(ctx, merchantID, id)
}

// List returns a page of records, newest first; search matches the name.
func (q Records[T]) List(ctx context.Context, merchantID, search string, p Page) (List[T], error) {
	items, total, err := q.rm.List(ctx, merchantID, search, p)
	return newList(items, total, p), err
}
