// SPDX-License-Identifier: Apache-2.0

// Package docs holds tests that check, mechanically, that the pages a user
// reads agree with the code: each component's settings table against its
// default configuration, the ports against the shipped configurations, the
// version against VERSION, and that user pages name no test function, issue
// number or commit hash (those belong in developer pages and history).
package docs
