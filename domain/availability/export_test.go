package availability

import "testing"

// SetChunkBudget sets the chunks a page reads beyond one per staff member,
// until the test ends.
func SetChunkBudget(t testing.TB, n int) {
	old := chunkBudget
	chunkBudget = n
	t.Cleanup(func() { chunkBudget = old })
}

// CountReads counts the chunks read, until the test ends.
func CountReads(t testing.TB) *int {
	n, old := new(int), readHook
	readHook = func() { *n++ }
	t.Cleanup(func() { readHook = old })
	return n
}
