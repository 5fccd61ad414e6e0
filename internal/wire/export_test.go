package wire

import "strings"

// SetTrimmer replaces the trimmer of the shared parts until the returned
// function restores it. drop(name) true drops every definition named name
// on top of what trimParts drops; all true keeps every definition (no trim).
func SetTrimmer(all bool, drop func(name string) bool) (restore func()) {
	old := trimmer
	trimmer = func(body string, parts []string) []string {
		if all {
			return parts
		}
		out := trimParts(body, parts)
		if drop == nil {
			return out
		}
		for i, p := range out {
			lines := strings.Split(p, "\n")
			defs, ok := luaDefs(lines, i)
			if !ok {
				continue
			}
			for k := len(defs) - 1; k >= 0; k-- {
				if drop(defs[k].name) {
					lines = append(lines[:defs[k].start], lines[defs[k].end+1:]...)
				}
			}
			out[i] = strings.Join(lines, "\n")
		}
		return out
	}
	return func() { trimmer = old }
}
