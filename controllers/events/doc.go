// Package events sends the controllers' events to the API server without
// losing them in a burst. client-go's broadcaster queues at most 1,000
// events and drops the rest when its sink is slower than the controllers;
// a sink that posts one event at a time, at the client's rate, is slower
// whenever thousands of VMIs start at once. Sink returns at once and posts
// from a queue of its own with a few workers.
//
// It owns event delivery only: what to record, and when, is the
// controllers'.
package events
