package query

import (
	"context"
	"errors"
	"time"
)

// ReadModel is what the queries of one aggregate need: one row and
// filtered pages, both limited to scope.
type ReadModel[V, F any] interface {
	Get(ctx context.Context, scope Scope, id string) (V, error)
	List(ctx context.Context, scope Scope, f F, p Page) (List[V], error)
}

// ServiceRequestFilter narrows a list of service requests.
type ServiceRequestFilter struct {
	Statuses   []string
	CustomerID string
	From, To   *time.Time // on appointment_start_at, [From, To)
}

// ScheduleFilter narrows a list of schedules.
type ScheduleFilter struct {
	Statuses []string
	StaffID  string
	From, To *time.Time // on start_at, [From, To)
}

// Reads answers the reads of one aggregate's read model: one row and
// filtered pages, limited to the caller's scope, with the names the views
// show (customer, staff, catalog item) looked up in the same merchant.
type Reads[V, F any] struct {
	rm     ReadModel[V, F]
	names  Names
	fields []nameField[V]
}

func newReads[V, F any](what string, rm ReadModel[V, F], names Names, fields ...nameField[V]) (Reads[V, F], error) {
	if rm == nil || names == nil {
		return Reads[V, F]{}, errors.New("query: " + what + ": nil dependency")
	}
	return Reads[V, F]{rm: rm, names: names, fields: fields}, nil
}

// Get returns one row, or apperr.ErrNotFound.
func (q Reads[V, F]) Get(ctx context.Context, scope Scope, id string) (V, error) {
	v, err := q.rm.Get(ctx, scope, id)
	if err != nil {
		return v, err
	}
	return q.Named(ctx, scope, v, nil)
}

// Named fills the names a view shows, from its merchant only. known holds
// names the caller read already, by id (a command's own checks); the
// others are looked up.
func (q Reads[V, F]) Named(ctx context.Context, scope Scope, v V, known map[string]string) (V, error) {
	items := []V{v}
	err := joinNames(ctx, q.names, scope.MerchantID, known, items, q.fields...)
	return items[0], err
}

// List returns a page of rows, newest first (time-ordered when the filter
// has a time range), and where the next page starts.
func (q Reads[V, F]) List(ctx context.Context, scope Scope, f F, p Page) (List[V], error) {
	l, err := q.rm.List(ctx, scope, f, p)
	if err == nil {
		err = joinNames(ctx, q.names, scope.MerchantID, nil, l.Items, q.fields...)
	}
	return l, err
}

// ServiceRequests answers the service-request reads.
type ServiceRequests = Reads[ServiceRequest, ServiceRequestFilter]

// NewServiceRequests checks its dependencies.
func NewServiceRequests(rm ReadModel[ServiceRequest, ServiceRequestFilter], names Names) (ServiceRequests, error) {
	return newReads("NewServiceRequests", rm, names,
		nameField[ServiceRequest]{Customers, func(v *ServiceRequest) *string { return &v.CustomerID }, func(v *ServiceRequest) *string { return &v.CustomerName }},
		nameField[ServiceRequest]{CatalogItems, func(v *ServiceRequest) *string { return v.CatalogItemID }, func(v *ServiceRequest) *string { return &v.CatalogItemName }},
	)
}

// Schedules answers the schedule reads.
type Schedules = Reads[Schedule, ScheduleFilter]

// NewSchedules checks its dependencies.
func NewSchedules(rm ReadModel[Schedule, ScheduleFilter], names Names) (Schedules, error) {
	return newReads("NewSchedules", rm, names,
		nameField[Schedule]{Staff, func(v *Schedule) *string { return &v.StaffID }, func(v *Schedule) *string { return &v.StaffName }},
	)
}

// RecordReader reads one kind of reference record of a merchant.
type RecordReader[T any] interface {
	Get(ctx context.Context, merchantID, id string) (T, error)
	List(ctx context.Context, merchantID, q string, p Page) (List[T], error)
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
	return q.rm.List(ctx, merchantID, search, p)
}
