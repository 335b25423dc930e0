package plan

// CountSteps runs f and returns how many dates the recurrences worked out
// (or tested) meanwhile: the work of the questions f put to plans. Not for
// parallel tests.
func CountSteps(f func()) int {
	n := 0
	step = func() { n++ }
	defer func() { step = nil }()
	f()
	return n
}
