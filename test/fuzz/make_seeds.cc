// Writes the seed corpora of the fuzz targets added with it (wire_header,
// state_dict, idx, file_store_log, peer_auth, store_auth) into
// <out>/<target>/: valid inputs made with the real encoders where there is
// one (WireHeader::data/control/make_probe, serialize_state_dict), plus edge
// cases by hand. The committed corpus under test/fuzz/corpus/ was produced by
//   build/bin/fuzz_make_seeds test/fuzz/corpus [target...]
// (no target: all of them) and then grew by the crash reproducers and the
// merged inputs of the fuzzers' runs (see docs/reliability.md). Each input starts with the driver's
// mode bytes; see the layout comment at the top of each <target>_fuzz.cc.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "collie/collectives/transport/peer_auth.h"
#include "collie/collectives/transport/wire.h"
#include "collie/nn/state_dict.h"
#include "collie/rendezvous/tcp_store/store_auth.h"
#include "collie/test/fuzz/wire_call.h"

using collie::fuzz::fuzz_call;

namespace {

using Bytes = std::vector<uint8_t>;
std::filesystem::path g_out;

void emit(const std::string& target, const std::string& name, const Bytes& bytes) {
  const auto dir = g_out / target;
  std::filesystem::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

Bytes cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

template <typename T>
void put(Bytes& out, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof v);
}

void put_be32(Bytes& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(v >> s));
}

// ---- wire_header: mode, count, stream -------------------------------------
Bytes header_bytes(const collie::WireHeader& h) {
  Bytes out(collie::kHeaderBytes);
  std::memcpy(out.data(), &h, collie::kHeaderBytes);
  return out;
}

Bytes data_frame(uint64_t count, uint64_t seq) {
  Bytes f = header_bytes(collie::WireHeader::data(
      collie::group_hash("fuzz/group"), fuzz_call(count, seq), static_cast<uint32_t>(count * 4)));
  for (uint64_t i = 0; i < count * 4; ++i) f.push_back(static_cast<uint8_t>(i * 7 + seq));
  return f;
}

Bytes abort_frame(const std::string& text, uint32_t declared) {
  Bytes f = header_bytes(collie::WireHeader::control(collie::group_hash("fuzz/group"),
                                                     collie::FrameType::kAbort, declared,
                                                     collie::ErrorKind::kTimeout));
  f.insert(f.end(), text.begin(), text.end());
  return f;
}

void wire_seeds() {
  const uint32_t group = collie::group_hash("fuzz/group");
  const Bytes goodbye =
      header_bytes(collie::WireHeader::control(group, collie::FrameType::kGoodbye, 0));
  const std::string why = "rank 2: all_reduce(float32, 3, sum) as op #2 timed out after 1s";
  // byte 0: bit 0 hung up first, bits 1-2 receives - 1; byte 1: count.
  emit("wire_header", "one_frame", cat({{0, 3}, data_frame(3, 1)}));
  emit("wire_header", "four_frames",
       cat({{6, 3}, data_frame(3, 1), data_frame(3, 2), data_frame(3, 3), data_frame(3, 4)}));
  emit("wire_header", "empty_payloads", cat({{2, 0}, data_frame(0, 1), data_frame(0, 2)}));
  emit("wire_header", "frame_then_abort",
       cat({{2, 3}, data_frame(3, 1), abort_frame(why, uint32_t(why.size()))}));
  emit("wire_header", "frame_then_goodbye", cat({{2, 3}, data_frame(3, 1), goodbye}));
  emit("wire_header", "hangup_abort", cat({{1, 3}, abort_frame(why, uint32_t(why.size()))}));
  emit("wire_header", "hangup_frames_abort",
       cat({{3, 3}, data_frame(3, 1), abort_frame(why, uint32_t(why.size()))}));
  emit("wire_header", "hangup_goodbye", cat({{1, 3}, goodbye}));
  emit("wire_header", "abort_text_cut", cat({{0, 3}, abort_frame("short", 4096)}));
  emit("wire_header", "hangup_abort_text_cut", cat({{1, 3}, abort_frame("short", 4096)}));
  Bytes wrong_seq = data_frame(3, 2);
  emit("wire_header", "wrong_seq", cat({{0, 3}, wrong_seq}));
  Bytes bad_enums = data_frame(3, 1);
  bad_enums[28] = 200;  // kind
  bad_enums[29] = 77;   // dtype
  bad_enums[30] = 99;   // op
  bad_enums[37] = 250;  // algorithm
  emit("wire_header", "bad_enums", cat({{0, 3}, bad_enums}));
  // A timeout probe where data was expected, and behind a frame on a hang-up.
  const Bytes probe = header_bytes(
      collie::WireHeader::make_probe(group, fuzz_call(3, 1), collie::ProbeReason::kTimedOut));
  emit("wire_header", "probe_where_data_expected", cat({{0, 3}, probe}));
  emit("wire_header", "frame_probe_abort",
       cat({{2, 3}, data_frame(3, 1), probe, abort_frame(why, uint32_t(why.size()))}));
  emit("wire_header", "hangup_probe_abort",
       cat({{1, 3}, probe, abort_frame(why, uint32_t(why.size()))}));
  Bytes bad_magic = data_frame(3, 1);
  bad_magic[0] ^= 0xff;
  emit("wire_header", "bad_magic", cat({{0, 3}, bad_magic}));
  emit("wire_header", "hangup_bad_magic", cat({{1, 3}, bad_magic}));
  Bytes half = data_frame(3, 1);
  half.resize(25);
  emit("wire_header", "half_header", cat({{0, 3}, half}));
  Bytes cut = data_frame(3, 1);
  cut.resize(cut.size() - 5);
  emit("wire_header", "payload_cut", cat({{0, 3}, cut}));
  // A large data frame whose payload never finished arriving: the stash
  // walk after a hang-up must stop at the end of what came.
  Bytes big = header_bytes(collie::WireHeader::data(group, fuzz_call(1 << 20, 1), 4u << 20));
  big.resize(big.size() + 60, 0xab);
  emit("wire_header", "hangup_big_frame_cut", cat({{1, 3}, big}));
  emit("wire_header", "empty", {0, 0});
}

// ---- state_dict: mode, file -----------------------------------------------
void state_dict_seeds() {
  namespace nn = collie::nn;
  nn::StateDict model;
  const std::vector<float> w = {0.5f, -1.f, 2.f, 3.25f, 0.f, 1e-3f};
  model.set_floats("model.0.weight", {2, 3}, w);
  model.set_floats("model.0.bias", {2}, std::vector<float>{0.1f, -0.1f});
  model.set_int("epoch", 7);
  model.set_double("lr", 3e-4);
  model.set_string("config", "{\"batch_size\": 64}");
  const Bytes good = nn::serialize_state_dict(model);
  emit("state_dict", "model", cat({{0}, good}));
  emit("state_dict", "model_repair", cat({{1}, good}));
  emit("state_dict", "empty", cat({{0}, nn::serialize_state_dict(nn::StateDict())}));
  nn::StateDict odd;
  odd.set_floats("zero", {0, 5}, std::vector<float>{});
  odd.set_floats("scalar", {}, std::vector<float>{1.f});
  odd.set_floats("eight_dims", {1, 1, 1, 1, 1, 1, 1, 2}, std::vector<float>{1.f, 2.f});
  emit("state_dict", "odd_shapes", cat({{1}, nn::serialize_state_dict(odd)}));

  Bytes truncated = good;
  truncated.resize(truncated.size() - 5);
  emit("state_dict", "truncated", cat({{0}, truncated}));
  emit("state_dict", "truncated_repair", cat({{1}, truncated}));
  Bytes flipped = good;
  flipped[flipped.size() - 3] ^= 1;
  emit("state_dict", "flipped_bit", cat({{0}, flipped}));
  Bytes magic = good;
  magic[0] = 'X';
  emit("state_dict", "bad_magic", cat({{0}, magic}));
  Bytes version = good;
  version[8] = 2;
  emit("state_dict", "version_2", cat({{0}, version}));
  Bytes count = good;
  std::memset(count.data() + 16, 0xff, 8);
  emit("state_dict", "huge_count", cat({{1}, count}));
  // One entry with a negative dimension, one with dimensions that multiply
  // past the file, one with a zero-length key; the driver fixes the checksum.
  auto one_entry = [](uint32_t key_len, uint8_t dtype, std::vector<int64_t> dims, uint64_t nbytes) {
    Bytes payload;
    put<uint32_t>(payload, key_len);
    for (uint32_t i = 0; i < key_len; ++i) payload.push_back('k');
    payload.push_back(dtype);
    payload.push_back(static_cast<uint8_t>(dims.size()));
    put<uint16_t>(payload, 0);
    for (int64_t d : dims) put<int64_t>(payload, d);
    put<uint64_t>(payload, nbytes);
    Bytes file = {'C', 'O', 'L', 'L', 'I', 'E', 'S', 'D'};
    put<uint32_t>(file, 1);
    put<uint32_t>(file, 0);
    put<uint64_t>(file, 1);
    put<uint64_t>(file, 0);  // size and checksum: repaired by the driver
    put<uint64_t>(file, 0);
    return cat({{1}, file, payload});
  };
  emit("state_dict", "negative_dim", one_entry(1, 0, {-4}, 0));
  emit("state_dict", "dims_overflow", one_entry(1, 0, {int64_t{1} << 40, int64_t{1} << 40}, 0));
  emit("state_dict", "zero_then_huge_dims",
       one_entry(1, 0, {0, int64_t{1} << 62, int64_t{1} << 62}, 0));
  emit("state_dict", "empty_key", one_entry(0, 0, {1}, 4));
  emit("state_dict", "bad_dtype", one_entry(1, 250, {1}, 1));
  emit("state_dict", "nine_dims", one_entry(1, 0, {1, 1, 1, 1, 1, 1, 1, 1, 1}, 4));
}

// ---- idx: the file ----------------------------------------------------------
Bytes idx(std::vector<uint32_t> dims, size_t data_bytes, uint8_t type = 8) {
  Bytes out = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) put_be32(out, d);
  for (size_t i = 0; i < data_bytes; ++i) out.push_back(static_cast<uint8_t>(i));
  return out;
}

void idx_seeds() {
  emit("idx", "labels", idx({10}, 10));
  emit("idx", "images", idx({2, 4, 4}, 32));
  emit("idx", "four_dims", idx({2, 1, 3, 2}, 12));
  emit("idx", "truncated", idx({2, 4, 4}, 31));
  emit("idx", "trailing", idx({2, 4, 4}, 33));
  emit("idx", "type_int32", idx({10}, 40, 0x0c));
  emit("idx", "zero_dims", idx({}, 0));
  emit("idx", "five_dims", idx({1, 1, 1, 1, 1}, 1));
  emit("idx", "zero_size", idx({0}, 0));
  emit("idx", "dims_overflow", idx({0xffffffffu, 0xffffffffu}, 0));
  emit("idx", "header_cut", Bytes{0, 0, 8, 3, 0, 0, 0, 2, 0});
  emit("idx", "bad_magic", Bytes{1, 0, 8, 1, 0, 0, 0, 1, 0});
  emit("idx", "short", Bytes{0, 0});
}

// ---- file_store_log: cap mode, cut, file -----------------------------------
Bytes record(const std::string& key, const std::string& value) {
  Bytes out;
  put<uint32_t>(out, static_cast<uint32_t>(key.size()));
  out.insert(out.end(), key.begin(), key.end());
  put<uint32_t>(out, static_cast<uint32_t>(value.size()));
  out.insert(out.end(), value.begin(), value.end());
  return out;
}

void file_store_log_seeds() {
  const Bytes log =
      cat({record("/worker/0", "10.0.0.1:29500"), record("counter", "1"), record("counter", "2"),
           record("-counter", ""), record("", ""), record("ready", std::string(40, 'x'))});
  emit("file_store_log", "records", cat({{0, 255}, log}));
  emit("file_store_log", "records_cut_mid", cat({{0, 100}, log}));
  emit("file_store_log", "records_cut_start", cat({{0, 0}, log}));
  emit("file_store_log", "records_small_cap", cat({{1, 128}, log}));
  emit("file_store_log", "over_small_cap", cat({{1, 50}, record("k", std::string(100, 'v'))}));
  Bytes huge;
  put<uint32_t>(huge, 0xffffffffu);
  emit("file_store_log", "huge_length", cat({{0, 3}, record("a", "b"), huge}));
  Bytes cut_value = record("key", "value");
  cut_value.resize(cut_value.size() - 2);
  emit("file_store_log", "value_cut", cat({{0, 200}, cut_value}));
  emit("file_store_log", "length_cut", cat({{0, 128}, Bytes{3, 0}}));
  emit("file_store_log", "empty", {0, 0});
}

// ---- peer_auth: mode, bytes per recv, stream ------------------------------
// The fuzz driver's identity: group_hash("fuzz/peer_auth"), size 4, rank 1.
Bytes peer_auth1(uint32_t magic, uint32_t version, uint32_t size, uint32_t rank, uint32_t target) {
  Bytes out;
  for (uint32_t v : {magic, version, collie::group_hash("fuzz/peer_auth"), size, rank, target})
    put<uint32_t>(out, v);
  for (int i = 0; i < 32; ++i) out.push_back(static_cast<uint8_t>(i * 13 + 1));  // Nc
  return out;
}

void peer_auth_seeds() {
  const uint32_t magic = collie::kPeerAuthMagic, v = collie::kPeerAuthVersion;
  const Bytes good = peer_auth1(magic, v, 4, 2, 1);
  const Bytes wrong_proof(32, 0x5a);
  // byte 0: bit 0 connector side, bit 1 honest proof, bit 2 repair AUTH1;
  // byte 1: bytes per recv (0: all).
  emit("peer_auth", "honest", cat({{2, 0}, good, Bytes{'h', 'e', 'l', 'l', 'o'}}));
  emit("peer_auth", "honest_byte_by_byte", cat({{2, 1}, good}));
  emit("peer_auth", "honest_rank3_cut7", cat({{2, 7}, peer_auth1(magic, v, 4, 3, 1)}));
  emit("peer_auth", "wrong_proof", cat({{0, 0}, good, wrong_proof}));
  emit("peer_auth", "wrong_proof_cut5", cat({{0, 5}, good, wrong_proof}));
  emit("peer_auth", "auth1_only", cat({{0, 0}, good}));
  emit("peer_auth", "auth1_cut", cat({{0, 3}, Bytes(good.begin(), good.begin() + 30)}));
  emit("peer_auth", "lower_rank", cat({{2, 0}, peer_auth1(magic, v, 4, 0, 1)}));
  emit("peer_auth", "own_rank", cat({{2, 0}, peer_auth1(magic, v, 4, 1, 1)}));
  emit("peer_auth", "rank_past_size", cat({{2, 0}, peer_auth1(magic, v, 4, 4, 1)}));
  emit("peer_auth", "other_size", cat({{2, 0}, peer_auth1(magic, v, 8, 2, 1)}));
  emit("peer_auth", "other_target", cat({{2, 0}, peer_auth1(magic, v, 4, 2, 0)}));
  emit("peer_auth", "version_2", cat({{2, 0}, peer_auth1(magic, 2, 4, 2, 1)}));
  emit("peer_auth", "repaired_fields", cat({{6, 0}, peer_auth1(0, 0, 0, 2, 0)}));
  emit("peer_auth", "repaired_wrong_proof", cat({{4, 0}, peer_auth1(0, 0, 0, 3, 0), wrong_proof}));
  // An unauthenticated rank's hello (WireHeader magic first), and strangers.
  Bytes hello;
  put<uint32_t>(hello, collie::kWireMagic);
  put<uint32_t>(hello, 2);
  emit("peer_auth", "unauthenticated_hello", cat({{0, 0}, hello}));
  emit("peer_auth", "http_get",
       cat({{0, 0}, Bytes{'G', 'E', 'T', ' ', '/', ' ', 'H', 'T', 'T', 'P'}}));
  emit("peer_auth", "three_bytes", cat({{0, 0}, Bytes{0x31, 0x41, 0x4c}}));
  emit("peer_auth", "empty", {0, 0});
  // The connector's side: what the acceptor answers (64 bytes, or less).
  Bytes answer;
  for (int i = 0; i < 64; ++i) answer.push_back(static_cast<uint8_t>(i * 31 + 7));
  emit("peer_auth", "connector_answer", cat({{1, 0}, answer}));
  emit("peer_auth", "connector_answer_cut",
       cat({{1, 0}, Bytes(answer.begin(), answer.begin() + 40)}));
  emit("peer_auth", "connector_nothing", {1, 0});
}

// ---- store_auth: mode, bytes per read, stream ------------------------------
Bytes store_auth1() {
  Bytes out{collie::kStoreAuthQuery};
  put<uint32_t>(out, collie::kStoreAuthMagic);
  for (int i = 0; i < 32; ++i) out.push_back(static_cast<uint8_t>(i * 17 + 3));  // Nc
  return out;
}

void store_auth_seeds() {
  const Bytes auth1 = store_auth1();
  // A TCPStore request that may follow: torch 2.x's VALIDATE (0x00, magic).
  Bytes validate{0x00};
  put<uint32_t>(validate, 0x3C85F7CE);
  // byte 0: bit 0 compatibility mode, bit 1 honest proof, bit 2 repair AUTH1;
  // byte 1: bytes per read (0: all).
  emit("store_auth", "honest", cat({{2, 0}, auth1, validate}));
  emit("store_auth", "honest_byte_by_byte", cat({{2, 1}, auth1}));
  emit("store_auth", "honest_compat_cut9", cat({{3, 9}, auth1, validate}));
  emit("store_auth", "wrong_proof", cat({{0, 0}, auth1, Bytes(32, 0xa5)}));
  emit("store_auth", "wrong_proof_cut4", cat({{0, 4}, auth1, Bytes(32, 0x11)}));
  emit("store_auth", "auth1_only", cat({{0, 0}, auth1}));
  emit("store_auth", "auth1_cut", cat({{0, 0}, Bytes(auth1.begin(), auth1.begin() + 20)}));
  Bytes wrong_magic = auth1;
  wrong_magic[2] ^= 0x40;
  emit("store_auth", "wrong_magic", cat({{0, 0}, wrong_magic}));
  emit("store_auth", "repaired_magic", cat({{6, 0}, wrong_magic}));
  emit("store_auth", "torch2_validate", cat({{0, 0}, validate}));
  emit("store_auth", "torch2_validate_compat", cat({{1, 0}, validate}));
  emit("store_auth", "collie_dialect_probe", cat({{0, 0}, Bytes{0x04, 0, 0, 0, 0}}));
  emit("store_auth", "torch113_set",
       cat({{1, 0}, Bytes{0x00, 3, 0, 0, 0, 0, 0, 0, 0, 'k', 'e', 'y'}}));
  emit("store_auth", "stranger", cat({{0, 0}, Bytes{0xff, 0xfe}}));
  emit("store_auth", "empty", {0, 0});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <corpus folder> [target...]\n", argv[0]);
    return 2;
  }
  g_out = argv[1];
  const std::vector<std::string> only(argv + 2, argv + argc);
  const std::pair<const char*, void (*)()> targets[] = {{"wire_header", wire_seeds},
                                                        {"state_dict", state_dict_seeds},
                                                        {"idx", idx_seeds},
                                                        {"file_store_log", file_store_log_seeds},
                                                        {"peer_auth", peer_auth_seeds},
                                                        {"store_auth", store_auth_seeds}};
  for (const auto& [name, make] : targets) {
    if (only.empty() || std::find(only.begin(), only.end(), name) != only.end()) make();
  }
  return 0;
}
