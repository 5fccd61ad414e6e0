package demo

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// svgStats is what a test reads back from a chart.
type svgStats struct {
	root     string
	points   map[string][][2]int // kind -> (arrival, grant) of each point, in document order
	late     map[string]int      // kind -> points drawn as out of turn
	bars     map[string]int      // kind -> histogram bars
	barTotal map[string]int      // kind -> sum of the bars' counts
	texts    []string
}

// readSVG decodes the whole document with encoding/xml and counts its
// points and bars.
func readSVG(t *testing.T, doc []byte) svgStats {
	t.Helper()
	st := svgStats{points: map[string][][2]int{}, late: map[string]int{}, bars: map[string]int{}, barTotal: map[string]int{}}
	dec := xml.NewDecoder(bytes.NewReader(doc))
	inText := false
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "the chart is not well-formed XML")
		switch e := tok.(type) {
		case xml.StartElement:
			if st.root == "" {
				st.root = e.Name.Local
			}
			attr := map[string]string{}
			for _, a := range e.Attr {
				attr[a.Name.Local] = a.Value
			}
			classes := strings.Fields(attr["class"])
			has := func(c string) bool {
				for _, x := range classes {
					if x == c {
						return true
					}
				}
				return false
			}
			kind := attr["data-kind"]
			switch {
			case e.Name.Local == "circle" && has("pt"):
				a, err1 := strconv.Atoi(attr["data-arrival"])
				g, err2 := strconv.Atoi(attr["data-grant"])
				require.NoError(t, errors.Join(err1, err2))
				st.points[kind] = append(st.points[kind], [2]int{a, g})
				if has("late") {
					st.late[kind]++
				}
			case e.Name.Local == "rect" && has("bar"):
				n, err := strconv.Atoi(attr["data-count"])
				require.NoError(t, err)
				st.bars[kind]++
				st.barTotal[kind] += n
			}
			inText = e.Name.Local == "text"
		case xml.CharData:
			if inText {
				st.texts = append(st.texts, string(e))
			}
		case xml.EndElement:
			inText = false
		}
	}
	return st
}

// history makes a result from arrivals in grant order and waits in ms.
func history(kind string, arrivals []int, waitsMs []int) *Result {
	r := &Result{Kind: kind}
	for i, a := range arrivals {
		r.Bookings = append(r.Bookings, Booking{Grant: i + 1, Arrival: a, Who: "c1g1",
			Wait: time.Duration(waitsMs[i]) * time.Millisecond})
	}
	return r
}

func TestWriteSVGKnownHistory(t *testing.T) {
	// fair: granted in arrival order; reentrant: a shuffle, with a gap in
	// its arrival numbers (arrival 4 never got the lock).
	fair := history(Fair, []int{1, 2, 3, 4, 5, 6}, []int{1, 2, 3, 4, 5, 6})
	unfair := history(Reentrant, []int{2, 1, 6, 3, 7, 5}, []int{1, 2, 3, 4, 5, 10})
	var buf bytes.Buffer
	require.NoError(t, WriteSVG(&buf, []*Result{fair, unfair}, ChartInfo{Subtitle: `a <run> & "its" Redis`}))
	st := readSVG(t, buf.Bytes())
	assert.Equal(t, "svg", st.root)

	assert.Len(t, st.points[Fair], 6)
	assert.Len(t, st.points[Reentrant], 6)
	for i, p := range st.points[Fair] {
		assert.Equal(t, [2]int{i + 1, i + 1}, p, "fair: on the diagonal")
	}
	// ranks among the granted: arrivals 2 1 6 3 7 5 -> 2 1 5 3 6 4
	want := [][2]int{{2, 1}, {1, 2}, {5, 3}, {3, 4}, {6, 5}, {4, 6}}
	assert.Equal(t, want, st.points[Reentrant])
	assert.Zero(t, st.late[Fair])
	// out of turn: grant 1 (arrival 1 waiting), grant 3 (arrival 3
	// waiting), grants 5 and 6 (arrival 4, never granted, waiting)
	assert.Equal(t, 4, st.late[Reentrant])
	assert.Equal(t, 4, unfair.OutOfTurn(), "the chart and the table agree")

	// The bins are shared: 0.25 ms wide up to 10 ms (the longest wait);
	// each wait of a whole number of ms has a bin of its own.
	bb := waitBins([]*Result{fair, unfair})
	assert.Equal(t, 250*time.Microsecond, bb.Width)
	assert.Equal(t, 41, bb.Count)
	assert.Equal(t, 6, st.bars[Fair])
	assert.Equal(t, 6, st.bars[Reentrant])
	assert.Equal(t, 6, st.barTotal[Fair])
	assert.Equal(t, 6, st.barTotal[Reentrant])

	all := strings.Join(st.texts, "\n")
	assert.Contains(t, all, `a <run> & "its" Redis`, "text is escaped, and reads back")
	assert.Contains(t, all, "fair: arrival against grant")
	assert.Contains(t, all, "reentrant: waits for the lock")
	assert.Contains(t, all, "4 of 6 grants out of turn")
}

func TestWriteSVGEdges(t *testing.T) {
	// One kind, one grant, a zero wait.
	var buf bytes.Buffer
	require.NoError(t, WriteSVG(&buf, []*Result{history(Fair, []int{1}, []int{0})}, ChartInfo{}))
	st := readSVG(t, buf.Bytes())
	assert.Len(t, st.points[Fair], 1)
	assert.Equal(t, 1, st.bars[Fair])

	// A run with no grants (cancelled at once) still draws its frames.
	buf.Reset()
	require.NoError(t, WriteSVG(&buf, []*Result{{Kind: Fair}}, ChartInfo{}))
	st = readSVG(t, buf.Bytes())
	assert.Empty(t, st.points[Fair])

	// A large run draws every k-th grant, and says so.
	n := 2*ChartMaxPoints + 1
	arr, waits := make([]int, n), make([]int, n)
	for i := range arr {
		arr[i], waits[i] = i+1, i%50
	}
	buf.Reset()
	require.NoError(t, WriteSVG(&buf, []*Result{history(Fair, arr, waits)}, ChartInfo{}))
	st = readSVG(t, buf.Bytes())
	assert.Len(t, st.points[Fair], (n+2)/3)
	assert.Equal(t, n, st.barTotal[Fair], "the histogram counts every grant")
	assert.Contains(t, strings.Join(st.texts, "\n"), "one grant in 3 drawn")

	// Nothing to chart, or a --multi run.
	assert.Error(t, WriteSVG(io.Discard, nil, ChartInfo{}))
	assert.Error(t, WriteSVG(io.Discard, []*Result{{Kind: SeatsHold, Multi: 4}}, ChartInfo{}))
}

func TestNiceStepAndTicks(t *testing.T) {
	for _, c := range [][2]float64{{0.3, 0.5}, {1, 1}, {1.1, 2}, {2.2, 2.5}, {3, 5}, {20.6, 25}, {60, 100}, {4e6, 5e6}} {
		assert.InDelta(t, c[1], niceStep(c[0]), c[1]*1e-9, "niceStep(%v)", c[0])
	}
	assert.Equal(t, []float64{0, 25, 50, 75, 100, 125}, niceTicks(108, 5))
	assert.Equal(t, []float64{0, 1, 2, 3}, countTicks(3, 5))
	assert.Equal(t, []float64{0, 5, 10, 15}, countTicks(12, 5), "no 2.5 grants")
	assert.Equal(t, []float64{0, 25, 50, 75, 100, 125}, countTicks(108, 5))
	assert.Equal(t, []int{1, 50, 100, 150, 200}, rankTicks(216))
	assert.Equal(t, []int{1, 2, 3}, rankTicks(3))
}

// The chart fits a 1200 x 900 window with every text inside it, and a
// --permits chart names the call its bookings wait in (Acquire), not Lock.
func TestWriteSVGFitsAndNamesTheCall(t *testing.T) {
	fair := history(Fair, []int{1, 2, 3}, []int{1, 2, 3})
	unfair := history(Reentrant, []int{2, 1, 3}, []int{1, 2, 3})
	semA := history(FairSemaphore, []int{1, 2, 3}, []int{1, 2, 3})
	semA.Permits = 3
	for _, rs := range [][]*Result{{fair, unfair}, {semA}} {
		var buf bytes.Buffer
		require.NoError(t, WriteSVG(&buf, rs, ChartInfo{Subtitle: "sub"}))
		var doc struct {
			W     int `xml:"width,attr"`
			H     int `xml:"height,attr"`
			Texts []struct {
				Y    float64 `xml:"y,attr"`
				Text string  `xml:",chardata"`
			} `xml:"text"`
		}
		require.NoError(t, xml.Unmarshal(buf.Bytes(), &doc))
		assert.LessOrEqual(t, doc.W, 1200, rs[0].Kind)
		assert.LessOrEqual(t, doc.H, 900, rs[0].Kind)
		call := "Lock"
		if rs[0].Permits > 0 {
			call = "Acquire"
		}
		var axis bool
		for _, tx := range doc.Texts {
			assert.Less(t, tx.Y, float64(doc.H)-4, "text %q below the chart", tx.Text)
			if strings.HasPrefix(tx.Text, "arrival rank") {
				axis = true
				assert.Contains(t, tx.Text, "first to call "+call, rs[0].Kind)
			}
			if rs[0].Permits > 0 {
				assert.NotContains(t, tx.Text, "call Lock")
				assert.NotContains(t, tx.Text, "calling Lock")
			}
		}
		assert.True(t, axis, "no x-axis label")
	}
}
