package main

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// profileDir holds the CPU profile of each Hearth process a section
// measures, one file per profile, named after it (gitignored; go tool
// pprof reads them).
const profileDir = "bench-profiles"

// profileCPU records the CPU profile of the Hearth process cmd from its
// admin listener (/debug/pprof/profile, served there only) until the
// returned stop is called, and stop saves it as profileDir/<name>.pprof
// (start does it for every process, stopHearth stops it). The recording is
// one-second profiles taken back to back, merged: a profile's length is
// fixed when it starts, and a process runs as long as its section needs.
// A process that serves no profile (an older binary) is noted in the
// progress and leaves no file.
func (b *bench) profileCPU(cmd *exec.Cmd, name string) (stop func()) {
	admin := b.adminOf(cmd)
	done, recorded := make(chan struct{}), make(chan []*profile.Profile, 1)
	go func() {
		var parts []*profile.Profile
		defer func() { recorded <- parts }()
		for {
			select {
			case <-done:
				return
			default:
			}
			p, err := fetchProfile(admin + "/debug/pprof/profile?seconds=1")
			if err != nil {
				b.progress("profile of %s: %v", name, err)
				return
			}
			parts = append(parts, p)
		}
	}()
	return func() {
		close(done)
		parts := <-recorded
		if len(parts) == 0 {
			return
		}
		merged, err := profile.Merge(parts)
		if err == nil {
			err = saveProfile(merged, name)
		}
		if err != nil {
			b.progress("profile of %s: %v", name, err)
			return
		}
		b.mu.Lock()
		if b.profiles == nil {
			b.profiles = map[string]*profile.Profile{}
		}
		b.profiles[name] = merged
		b.mu.Unlock()
	}
}

func fetchProfile(url string) (*profile.Profile, error) {
	res, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", res.Status, bytes.TrimSpace(body))
	}
	return profile.ParseData(body)
}

func saveProfile(p *profile.Profile, name string) error {
	if err := os.MkdirAll(profileDir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(profilePath(name))
	if err != nil {
		return err
	}
	if err := p.Write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// profilePath is where the profile of name is saved.
func profilePath(name string) string {
	return filepath.Join(profileDir, strings.NewReplacer(" ", "-", ",", "", "/", "-").Replace(name)+".pprof")
}

// cpuUse is one function's share of a profile: flat, the samples where it
// was running; cum, those where it was on the stack.
type cpuUse struct {
	function  string
	flat, cum int64
}

// topFunctions reads p's CPU (nanoseconds) by function, as go tool pprof
// -top counts it (inlined calls are functions of their own).
func topFunctions(p *profile.Profile) (uses []cpuUse, total int64) {
	index := slices.IndexFunc(p.SampleType, func(t *profile.ValueType) bool { return t.Type == "cpu" })
	if index < 0 {
		return nil, 0
	}
	byName := map[string]*cpuUse{}
	use := func(name string) *cpuUse {
		u := byName[name]
		if u == nil {
			u = &cpuUse{function: name}
			byName[name] = u
		}
		return u
	}
	for _, s := range p.Sample {
		v := s.Value[index]
		total += v
		seen := map[string]bool{}
		for i, loc := range s.Location {
			for j, line := range loc.Line {
				if line.Function == nil {
					continue
				}
				name := line.Function.Name
				if i == 0 && j == 0 {
					use(name).flat += v
				}
				if !seen[name] {
					seen[name] = true
					use(name).cum += v
				}
			}
		}
	}
	for _, u := range byName {
		uses = append(uses, *u)
	}
	return uses, total
}

// ownNamed reports whether a function is one of Hearth's named functions:
// in its packages or its command's main package, and not a function
// literal (F.func1), whose cumulative share only repeats what it wraps (a
// middleware, a goroutine's body) or what it calls.
func ownNamed(function string) bool {
	return (strings.HasPrefix(function, "hearth/") || strings.HasPrefix(function, "main.")) && !closure.MatchString(function)
}

var closure = regexp.MustCompile(`\.func\d+(\.\d+)*$`)

// profilesInDoc are the profiles whose top functions docs/benchmarks.md
// lists, by the name their section recorded them under, each with its
// heading there: the commands' profile of the baseline binary is the
// "before" of the commands' "after", from the same run.
var profilesInDoc = []struct{ name, heading string }{
	{"commands, mode api", "commands, mode api (after: this code)"},
	{"commands, baseline", "commands, mode api, the baseline binary (before: BENCH_BASELINE)"},
	{"catch-up", "catch-up"},
}

// profileTops is docs/benchmarks.md's part on where the CPU went: for each
// profile of profilesInDoc that was recorded, the top functions by flat
// CPU (any code) and by cumulative CPU (Hearth's own).
func (b *bench) profileTops() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out strings.Builder
	for _, doc := range profilesInDoc {
		p := b.profiles[doc.name]
		if p == nil {
			continue
		}
		uses, total := topFunctions(p)
		if total == 0 {
			continue
		}
		if out.Len() == 0 {
			out.WriteString("\n## Where the CPU goes\n\nTop functions of the Hearth process's CPU profile (`go tool pprof " + profileDir + "/<section>.pprof`), " +
				"as shares of its samples: flat, running in the function itself; cumulative, with what it calls.\n")
		}
		pct := func(v int64) string { return fmt.Sprintf("%.1f %%", 100*float64(v)/float64(total)) }
		table := func(title string, uses []cpuUse) {
			fmt.Fprintf(&out, "\n%s\n\n| function | flat | cumulative |\n|---|---|---|\n", title)
			for _, u := range uses[:min(10, len(uses))] {
				fmt.Fprintf(&out, "| `%s` | %s | %s |\n", u.function, pct(u.flat), pct(u.cum))
			}
		}
		fmt.Fprintf(&out, "\n### %s: %s of CPU over %s\n", doc.heading,
			time.Duration(total).Round(10*time.Millisecond), time.Duration(p.DurationNanos).Round(time.Second))
		slices.SortFunc(uses, func(a, b cpuUse) int {
			return cmp.Or(cmp.Compare(b.flat, a.flat), strings.Compare(a.function, b.function))
		})
		table("Top 10 by flat CPU, all code:", uses)
		own := slices.DeleteFunc(slices.Clone(uses), func(u cpuUse) bool { return !ownNamed(u.function) })
		slices.SortFunc(own, func(a, b cpuUse) int {
			return cmp.Or(cmp.Compare(b.cum, a.cum), strings.Compare(a.function, b.function))
		})
		table("Top 10 by cumulative CPU, Hearth's own named functions (function literals left out):", own)
	}
	return out.String()
}
