package main

import (
	"testing"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/require"
)

// topFunctions counts a sample's CPU as flat for the innermost function of
// its leaf (an inlined call is a function of its own) and as cumulative
// once for each function on its stack, however often it appears there.
func TestTopFunctions(t *testing.T) {
	fn := func(id uint64, name string) *profile.Function { return &profile.Function{ID: id, Name: name} }
	apply, syscall, inlined := fn(1, "hearth/adapters/readmodel.Apply"), fn(2, "runtime.syscall"), fn(3, "main.inlined")
	caller := &profile.Location{ID: 1, Line: []profile.Line{{Function: apply}}}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Sample: []*profile.Sample{
			{Value: []int64{1, 10}, Location: []*profile.Location{{ID: 2, Line: []profile.Line{{Function: syscall}}}, caller}},
			// main.inlined, inlined into Apply, called by Apply (recursion).
			{Value: []int64{1, 5}, Location: []*profile.Location{{ID: 3, Line: []profile.Line{{Function: inlined}, {Function: apply}}}, caller}},
		},
	}
	uses, total := topFunctions(p)
	require.Equal(t, int64(15), total)
	require.ElementsMatch(t, []cpuUse{
		{function: apply.Name, flat: 0, cum: 15},
		{function: syscall.Name, flat: 10, cum: 10},
		{function: inlined.Name, flat: 5, cum: 5},
	}, uses)
}

// The cumulative list keeps Hearth's named functions: not other modules',
// not function literals.
func TestOwnNamed(t *testing.T) {
	for name, want := range map[string]bool{
		"hearth/adapters/pubsub/projector.CatchUp.Run": true,
		"main.serve": true,
		"hearth/ports/http.NewHandler.(*server).logRequests.func13":                   false,
		"hearth/adapters/readmodel.(*projection[go.shape.*uint8]).ApplyBatch.func1.2": false,
		"github.com/ThreeDotsLabs/watermill/message.(*Router).Run":                    false,
		"runtime.memmove": false,
	} {
		require.Equal(t, want, ownNamed(name), name)
	}
}
