// SLURM's compressed host lists, as in SLURM_JOB_NODELIST:
//
//   "node[001-004,007],gpu-[1-2]"  ->  node001 node002 node003 node004 node007 gpu-1 gpu-2
//   "rack[1-2]-n[8-10]"            ->  rack1-n8 rack1-n9 rack1-n10 rack2-n8 ...
//
// A list is comma-separated host expressions (commas inside brackets belong
// to the brackets). An expression is text with any number of bracket groups;
// each group is a comma-separated list of numbers and ranges "lo-hi" with
// lo <= hi, and a number keeps the width of the bound it came from, zeros
// included ("[08-10]" -> 08 09 10, "[8-10]" -> 8 9 10). Several groups
// multiply out, the last one varying fastest, as scontrol does. Anything
// else (an unclosed or empty bracket, a descending range, a letter inside a
// bracket, an empty item) throws InvalidArgument naming the list and the
// position.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace collie {

// Every host, in order. Throws InvalidArgument when the list is malformed
// or names more than `max_hosts` hosts (a typo like "n[1-999999999]" must
// not allocate gigabytes).
std::vector<std::string> expand_nodelist(std::string_view list, size_t max_hosts = 1 << 20);

// The first host, without expanding the rest (MASTER_ADDR under SLURM).
std::string first_host(std::string_view list);

// How many hosts the list names, without expanding it.
size_t count_hosts(std::string_view list);

}  // namespace collie
