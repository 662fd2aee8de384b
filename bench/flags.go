package bench

import (
	"fmt"
	"strconv"
	"strings"
)

// intList is a comma-separated list of ints as a flag.Value.
type intList []int

func (l *intList) String() string {
	parts := make([]string, len(*l))
	for i, v := range *l {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, ",")
}

func (l *intList) Set(s string) error {
	var out []int
	for _, part := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil {
			return fmt.Errorf("not an integer list: %q", s)
		}
		out = append(out, v)
	}
	*l = out
	return nil
}
