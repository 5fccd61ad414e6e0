package wire

import (
	"regexp"
	"strings"
)

// compose returns the text of a script as it is sent to Redis: the shared
// parts, in order, each without the top-level functions that nothing kept
// calls, then the body whole (issue 33). A script runs its whole text on
// every EVALSHA, so each `local function` of a shared part makes a closure
// at every call, called or not; the fair-lock scripts define about 77.
//
// A definition is dropped only when it has the shape every shared file
// follows: a line starting at column 0 with "local function NAME(" up to the
// next line that is exactly "end", with no other column-0 line in between.
// A part that does not follow that shape (or holds a long bracket, "[[" or
// "[=", which the scan below does not read) is kept whole. Everything else
// of a part (its constants, forward-declared locals, top-level statements
// such as fair_fast_take.lua's) is kept, and the names it references count
// as used, like those of the body. A name counts as used when it appears as
// an identifier outside comments; strings count, so a scan can keep too
// much, never too little.
func compose(body string, parts ...string) string {
	return composeWith(trimmer, body, parts...)
}

// composer is compose's signature; the Source functions take one so that
// editSource can compose a script whole.
type composer func(body string, parts ...string) string

// composeWhole is compose without the trim: every shared function kept.
func composeWhole(body string, parts ...string) string {
	return composeWith(func(_ string, parts []string) []string { return parts }, body, parts...)
}

// editSource is the text of file for the Edit functions (tests' broken
// script sets): edit is applied once, to the script composed whole (as
// scripts were composed before the trim), and a script it leaves as it is
// is sent as Redis gets it normally (trimmed). So a broken variant whose new
// text calls a shared function the trim leaves out of that script runs as
// written, instead of failing on a missing function and being "caught" for
// that; and an edit that counts its matches sees each shared function once.
func editSource(file string, edit func(file, src string) string, src func(string, composer) string) string {
	if edit == nil {
		return src(file, compose)
	}
	whole := src(file, composeWhole)
	if e := edit(file, whole); e != whole {
		return e
	}
	return src(file, compose)
}

// trimmer is trimParts; tests swap in broken ones.
var trimmer = trimParts

// composeWith is compose with the trimmer given (tests give broken ones).
func composeWith(trim func(body string, parts []string) []string, body string, parts ...string) string {
	var b strings.Builder
	for _, p := range trim(body, parts) {
		b.WriteString(p)
	}
	b.WriteString(body)
	return b.String()
}

// luaDef is one droppable top-level definition of a shared part.
type luaDef struct {
	name       string
	part       int // index of its part
	start, end int // its lines, end included
}

var defStart = regexp.MustCompile(`^local function ([A-Za-z_][A-Za-z0-9_]*)\s*\(`)

// luaDefs returns the droppable definitions of part (as lines), or ok false
// when the part does not follow the shape.
func luaDefs(lines []string, part int) (defs []luaDef, ok bool) {
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.Contains(l, "[[") || strings.Contains(l, "[=") {
			return nil, false
		}
		m := defStart.FindStringSubmatch(l)
		if m == nil {
			if strings.HasPrefix(l, "local function") {
				return nil, false
			}
			continue
		}
		d := luaDef{name: m[1], part: part, start: i}
		for j := i + 1; ; j++ {
			if j == len(lines) {
				return nil, false // no closing end
			}
			t := lines[j]
			if strings.Contains(t, "[[") || strings.Contains(t, "[=") {
				return nil, false
			}
			if t == "end" {
				d.end = j
				break
			}
			if t != "" && t[0] != ' ' && t[0] != '\t' && !strings.HasPrefix(t, "--") {
				return nil, false // a column-0 line inside: not the shape
			}
		}
		defs = append(defs, d)
		i = d.end
	}
	return defs, true
}

// trimParts returns parts without their definitions that neither body nor
// the rest of the parts (nor a kept definition) references.
func trimParts(body string, parts []string) []string {
	split := make([][]string, len(parts))
	var all []luaDef
	droppable := make([]bool, len(parts))
	for i, p := range parts {
		split[i] = strings.Split(p, "\n")
		defs, ok := luaDefs(split[i], i)
		if ok {
			droppable[i] = true
			all = append(all, defs...)
		}
	}
	byName := make(map[string][]int, len(all)) // name -> its definitions
	inDef := make([]map[int]int, len(parts))   // part -> line -> definition
	for k, d := range all {
		byName[d.name] = append(byName[d.name], k)
		if inDef[d.part] == nil {
			inDef[d.part] = map[int]int{}
		}
		for l := d.start; l <= d.end; l++ {
			inDef[d.part][l] = k
		}
	}
	used := map[string]bool{}
	var work []string
	mark := func(text string) {
		for _, id := range luaIdents(text) {
			if !used[id] {
				used[id] = true
				work = append(work, id)
			}
		}
	}
	mark(body)
	for i := range parts {
		var rest strings.Builder
		for l, line := range split[i] {
			if _, in := inDef[i][l]; !in {
				rest.WriteString(line)
				rest.WriteByte('\n')
			}
		}
		mark(rest.String())
	}
	keep := make([]bool, len(all))
	for len(work) > 0 {
		id := work[len(work)-1]
		work = work[:len(work)-1]
		for _, k := range byName[id] {
			if keep[k] {
				continue
			}
			keep[k] = true
			d := all[k]
			mark(strings.Join(split[d.part][d.start:d.end+1], "\n"))
		}
	}
	out := make([]string, len(parts))
	for i, p := range parts {
		if !droppable[i] || len(inDef[i]) == 0 {
			out[i] = p
			continue
		}
		var b strings.Builder
		for l, line := range split[i] {
			if k, in := inDef[i][l]; in && !keep[k] {
				continue
			}
			b.WriteString(line)
			if l < len(split[i])-1 {
				b.WriteByte('\n')
			}
		}
		out[i] = b.String()
	}
	return out
}

// luaIdents returns the identifiers of text outside its comments ("--" to
// the end of the line, outside a quoted string). Keywords are returned too;
// no definition is named like one.
func luaIdents(text string) []string {
	var ids []string
	for i := 0; i < len(text); {
		c := text[i]
		switch {
		case c == '-' && i+1 < len(text) && text[i+1] == '-':
			for i < len(text) && text[i] != '\n' {
				i++
			}
		case c == '\'' || c == '"':
			// a string's words count as used (safe: keeps more)
			j := i + 1
			for j < len(text) && text[j] != c && text[j] != '\n' {
				if text[j] == '\\' {
					j++
				}
				j++
			}
			ids = append(ids, luaIdents(text[i+1:min(j, len(text))])...)
			i = j + 1
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i + 1
			for j < len(text) && (text[j] == '_' || text[j] >= 'a' && text[j] <= 'z' || text[j] >= 'A' && text[j] <= 'Z' || text[j] >= '0' && text[j] <= '9') {
				j++
			}
			ids = append(ids, text[i:j])
			i = j
		case c >= '0' && c <= '9':
			j := i + 1
			for j < len(text) && (text[j] == '_' || text[j] == '.' || text[j] >= 'a' && text[j] <= 'z' || text[j] >= 'A' && text[j] <= 'Z' || text[j] >= '0' && text[j] <= '9') {
				j++
			}
			i = j
		default:
			i++
		}
	}
	return ids
}
