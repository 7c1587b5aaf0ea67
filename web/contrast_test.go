package web

import (
	"math"
	"regexp"
	"strconv"
	"testing"
)

// The page's colours meet WCAG 2 AA: 4.5:1 for text, on every background
// it is drawn on.
func TestContrast(t *testing.T) {
	t.Parallel()
	css, err := assets.ReadFile("assets/app.css")
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, m := range regexp.MustCompile(`--([a-z]+): (#[0-9a-f]{6})`).FindAllStringSubmatch(string(css), -1) {
		vars[m[1]] = m[2]
	}
	white, navy := "#ffffff", "#102a43" // the header's background
	pairs := []struct{ fg, bg string }{{white, navy}, {white, "#243b53"}}
	for _, text := range []string{"text", "muted", "accent", "allowed", "denied", "shadow", "failopen"} {
		for _, bg := range []string{"card", "bg"} {
			pairs = append(pairs, struct{ fg, bg string }{vars[text], vars[bg]})
		}
	}
	for _, badge := range []string{"accent", "allowed", "denied", "failopen"} { // white text on them
		pairs = append(pairs, struct{ fg, bg string }{white, vars[badge]})
	}
	for _, p := range pairs {
		if p.fg == "" || p.bg == "" {
			t.Fatalf("a colour is missing from app.css: %v", vars)
		}
		if r := contrast(p.fg, p.bg); r < 4.5 {
			t.Errorf("%s on %s: contrast %.2f, want at least 4.5", p.fg, p.bg, r)
		}
	}
}

func contrast(a, b string) float64 {
	la, lb := luminance(a), luminance(b)
	return (math.Max(la, lb) + 0.05) / (math.Min(la, lb) + 0.05)
}

func luminance(hex string) float64 {
	var l float64
	for i, w := range []float64{0.2126, 0.7152, 0.0722} {
		v, _ := strconv.ParseUint(hex[1+2*i:3+2*i], 16, 8)
		c := float64(v) / 255
		if c <= 0.03928 {
			c /= 12.92
		} else {
			c = math.Pow((c+0.055)/1.055, 2.4)
		}
		l += w * c
	}
	return l
}
