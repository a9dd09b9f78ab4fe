// Processes for launches that bring no MPI: torchrun's RANK/WORLD_SIZE,
// with MASTER_ADDR/MASTER_PORT naming where process 0 is. Process 0 serves
// a small key-value store over TCP; every process (0 too) reaches it as a
// client, and every message between processes is a value put under a key
// that names its sender and receiver, and taken (read and removed) by the
// receiver. Waits poll, as the MPI path's do, so that they notice a local
// abort, another process's failure, or their timeout.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "exec/processes.h"

namespace thunky {

namespace {

using Clock = std::chrono::steady_clock;

enum Op : uint8_t { kSet = 1, kTake = 2, kPeek = 3 };
constexpr uint32_t kMaxKey = 1024;
constexpr uint64_t kMaxValue = uint64_t{1} << 36;  // 64 GiB: anything larger is not one of ours
constexpr double kLeaveS = 10;  // how long process 0 waits at exit for the others to leave the store

// Whole reads and writes on a blocking socket; false when it closed.
bool read_all(int fd, void* p, size_t n) {
  auto* b = static_cast<uint8_t*>(p);
  while (n > 0) {
    const ssize_t got = ::recv(fd, b, n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    b += got, n -= static_cast<size_t>(got);
  }
  return true;
}
bool write_all(int fd, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    const ssize_t put = ::send(fd, b, n, MSG_NOSIGNAL);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    b += put, n -= static_cast<size_t>(put);
  }
  return true;
}

// The store, in process 0: a thread per client connection, one map. A
// client first says which process it is ("hello"); one whose connection
// closes before it said it left ("left/...") is listed under "gone", so
// that the others stop waiting for it at once.
class StoreServer {
 public:
  // Listens on `port` of every interface; throws ThunkyError where it cannot.
  explicit StoreServer(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) throw ThunkyError("", std::string("cannot open a socket for the process store: ") + std::strerror(errno));
    const int on = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 1024) != 0) {
      const std::string why = std::strerror(errno);
      ::close(fd_);
      throw ThunkyError("", "process 0 cannot serve the process store on port " + std::to_string(port) + ": " + why +
                                " (set THUNKY_STORE_PORT to a free port, the same on every process)");
    }
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~StoreServer() {
    stop_ = true;
    acceptor_.join();
    {
      std::lock_guard<std::mutex> l(mu_);
      for (int c : clients_) ::shutdown(c, SHUT_RDWR);
    }
    for (auto& t : served_) t.join();
    for (int c : clients_) ::close(c);
    ::close(fd_);
  }

 private:
  void accept_loop() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      const int on = 1;
      ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
      std::lock_guard<std::mutex> l(mu_);
      clients_.push_back(c);
      served_.emplace_back([this, c] { serve(c); });
    }
  }
  // One client's requests, in order, until it closes (or sends what no
  // process of ours sends: the connection is dropped).
  void serve(int c) {
    int who = -1;
    bool left = false;
    serve_requests(c, who, left);
    if (who < 0 || left || stop_) return;
    std::lock_guard<std::mutex> l(mu_);
    auto& gone = data_["gone"];
    gone.resize(gone.size() + sizeof who);
    std::memcpy(gone.data() + gone.size() - sizeof who, &who, sizeof who);
  }
  void serve_requests(int c, int& who, bool& left) {
    for (;;) {
      uint8_t op = 0;
      uint32_t klen = 0;
      if (!read_all(c, &op, 1) || !read_all(c, &klen, 4) || klen > kMaxKey) return;
      std::string key(klen, '\0');
      if (!read_all(c, key.data(), klen)) return;
      if (op == kSet) {
        uint64_t vlen = 0;
        if (!read_all(c, &vlen, 8) || vlen > kMaxValue) return;
        std::vector<uint8_t> value(vlen);
        if (!read_all(c, value.data(), vlen)) return;
        if (key == "hello" && value.size() == sizeof who) std::memcpy(&who, value.data(), sizeof who);
        if (key.rfind("left/", 0) == 0) left = true;
        {
          std::lock_guard<std::mutex> l(mu_);
          data_[key] = std::move(value);
        }
        const uint8_t ok = 1;
        if (!write_all(c, &ok, 1)) return;
      } else if (op == kTake || op == kPeek) {
        std::vector<uint8_t> value;
        uint8_t found = 0;
        {
          std::lock_guard<std::mutex> l(mu_);
          if (auto it = data_.find(key); it != data_.end()) {
            found = 1;
            if (op == kTake) {
              value = std::move(it->second);
              data_.erase(it);
            } else {
              value = it->second;
            }
          }
        }
        const uint64_t vlen = value.size();
        if (!write_all(c, &found, 1) || (found && (!write_all(c, &vlen, 8) || !write_all(c, value.data(), vlen)))) return;
      } else {
        return;
      }
    }
  }

  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<int> clients_;
  std::vector<std::thread> served_;
  std::map<std::string, std::vector<uint8_t>> data_;
};

// The store's client: one connection, one request at a time.
class StoreClient {
 public:
  // Connects within `timeout_s` (process 0 may not listen yet).
  StoreClient(const std::string& host, int port, double timeout_s) : where_(host + ":" + std::to_string(port)) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (const int e = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); e != 0)
      throw ThunkyError("", "MASTER_ADDR '" + host + "' does not resolve: " + ::gai_strerror(e));
    const auto start = Clock::now();
    for (;;) {
      for (addrinfo* a = found; a && fd_ < 0; a = a->ai_next) {
        const int s = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (s >= 0 && ::connect(s, a->ai_addr, a->ai_addrlen) == 0) fd_ = s;
        else if (s >= 0) ::close(s);
      }
      if (fd_ >= 0 || std::chrono::duration<double>(Clock::now() - start).count() > timeout_s) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ::freeaddrinfo(found);
    if (fd_ < 0)
      throw ThunkyError("", "cannot reach process 0's store at " + where_ + " (MASTER_ADDR, MASTER_PORT) within " + std::to_string(static_cast<int>(timeout_s)) + " s");
    const int on = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  }
  // Says which process this client is (before any other request).
  void hello(int index) {
    std::vector<uint8_t> v(sizeof index);
    std::memcpy(v.data(), &index, sizeof index);
    set("hello", v);
  }
  ~StoreClient() {
    if (fd_ >= 0) ::close(fd_);
  }

  void set(const std::string& key, const std::vector<uint8_t>& value) {
    std::lock_guard<std::mutex> l(mu_);
    const uint64_t vlen = value.size();
    uint8_t ok = 0;
    if (!(send_key(kSet, key) && write_all(fd_, &vlen, 8) && write_all(fd_, value.data(), vlen) && read_all(fd_, &ok, 1))) lost();
  }
  // The value under `key`, removed (take) or left (peek); nullopt if none yet.
  std::optional<std::vector<uint8_t>> get(const std::string& key, bool take) {
    std::lock_guard<std::mutex> l(mu_);
    uint8_t found = 0;
    if (!send_key(take ? kTake : kPeek, key) || !read_all(fd_, &found, 1)) lost();
    if (!found) return std::nullopt;
    uint64_t vlen = 0;
    if (!read_all(fd_, &vlen, 8) || vlen > kMaxValue) lost();
    std::vector<uint8_t> value(vlen);
    if (!read_all(fd_, value.data(), vlen)) lost();
    return value;
  }

 private:
  bool send_key(uint8_t op, const std::string& key) {
    const uint32_t klen = static_cast<uint32_t>(key.size());
    return write_all(fd_, &op, 1) && write_all(fd_, &klen, 4) && write_all(fd_, key.data(), key.size());
  }
  [[noreturn]] void lost() {
    throw ProcessTimeout("the process store at " + where_ + " closed: process 0 is gone", {0});
  }

  std::string where_;
  int fd_ = -1;
  std::mutex mu_;
};

// Keys: a prefix and a count ("g3/"); a message's from one process to
// another ("g3/1>0"). Built by appending: GCC 12 warns, wrongly, of
// "literal" + std::string (-Wrestrict).
std::string named(const char* prefix, uint64_t n) {
  std::string s(prefix);
  s += std::to_string(n);
  s += '/';
  return s;
}
std::string between(const std::string& name, int from, int to) {
  std::string s = name;
  s += std::to_string(from);
  s += '>';
  s += std::to_string(to);
  return s;
}

class StoreProcesses final : public Processes {
 public:
  StoreProcesses(ProcessPlace place, std::unique_ptr<StoreServer> server, std::unique_ptr<StoreClient> client)
      : place_(std::move(place)), server_(std::move(server)), client_(std::move(client)) {}
  ~StoreProcesses() override {
    // Process 0 serves until every other process has left: each says so
    // before it closes, so that none loses the store mid-request.
    try {
      if (place_.index != 0) client_->set(between("left/", place_.index, 0), {});
      else
        for (int q = 1; q < place_.count; ++q) receive(between("left/", q, 0), q, kLeaveS, "the others leaving", {});
    } catch (const std::exception&) {  // a process gone already: nothing to wait for
    }
  }

  const ProcessPlace& place() const override { return place_; }

  std::vector<std::vector<uint8_t>> exchange(uint64_t key, const std::vector<uint8_t>& mine, const std::vector<int>& peers, double timeout_s,
                                             const std::function<void()>& poll) override {
    const std::string name = named("x", key);
    for (int q : peers) client_->set(between(name, place_.index, q), mine);
    std::vector<std::string> keys;
    for (int q : peers) keys.push_back(between(name, q, place_.index));
    return receive_all(keys, peers, timeout_s, "waiting for the other processes", poll);
  }

  std::vector<std::vector<uint8_t>> gather(const std::vector<uint8_t>& mine) override {
    const std::string name = named("g", gathers_++);
    if (place_.index != 0) {
      client_->set(between(name, place_.index, 0), mine);
      return {};
    }
    std::vector<std::string> keys;
    std::vector<int> others;
    for (int q = 1; q < place_.count; ++q) keys.push_back(between(name, q, 0)), others.push_back(q);
    auto got = receive_all(keys, others, timeout_s, "gathering the others' results", {});
    got.insert(got.begin(), mine);
    return got;
  }

  double max(double mine) override {
    std::vector<uint8_t> bytes(sizeof mine);
    std::memcpy(bytes.data(), &mine, sizeof mine);
    double out = mine;
    for (const auto& theirs : all_to_all("m", bytes, "the others' makespans")) {
      double v = 0;
      if (theirs.size() == sizeof v) std::memcpy(&v, theirs.data(), sizeof v);
      out = std::max(out, v);
    }
    return out;
  }

  void barrier() override { all_to_all("b", {}, "the others at a barrier"); }

  void fail(const std::string& reason, int exit_code) override {
    std::vector<uint8_t> msg(2 * sizeof(int) + reason.size());
    std::memcpy(msg.data(), &exit_code, sizeof(int));
    std::memcpy(msg.data() + sizeof(int), &place_.index, sizeof(int));
    std::memcpy(msg.data() + 2 * sizeof(int), reason.data(), reason.size());
    try {
      client_->set("fail", msg);
    } catch (const std::exception&) {  // the store is gone: the others learn it themselves
    }
  }

  std::optional<ProcessStop> failure() override {
    std::lock_guard<std::mutex> l(mu_);
    if (failure_) return failure_;
    const auto msg = client_->get("fail", /*take=*/false);
    if (!msg || msg->size() < 2 * sizeof(int)) return std::nullopt;
    ProcessStop stop;
    int from = 0;
    std::memcpy(&stop.exit_code, msg->data(), sizeof(int));
    std::memcpy(&from, msg->data() + sizeof(int), sizeof(int));
    if (from == place_.index) return std::nullopt;
    stop.reason = "process " + std::to_string(from) + " stopped: " + std::string(msg->begin() + 2 * sizeof(int), msg->end());
    failure_ = stop;
    return failure_;
  }

 private:
  // Every other process's `mine` under `prefix` and a per-prefix count.
  std::vector<std::vector<uint8_t>> all_to_all(const char* prefix, const std::vector<uint8_t>& mine, const char* what) {
    const std::string name = named(prefix, static_cast<uint64_t>(rounds_[prefix]++));
    std::vector<std::string> keys;
    std::vector<int> others;
    for (int q = 0; q < place_.count; ++q) {
      if (q == place_.index) continue;
      client_->set(between(name, place_.index, q), mine);
      keys.push_back(between(name, q, place_.index));
      others.push_back(q);
    }
    return receive_all(keys, others, timeout_s, what, {});
  }

  std::vector<uint8_t> receive(const std::string& key, int from, double timeout_s, const char* what, const std::function<void()>& poll) {
    return receive_all({key}, {from}, timeout_s, what, poll).front();
  }

  // Takes each of `keys` (sent by `from`, in order) as it arrives; polls
  // for a failure, `poll`'s stop and the timeout between rounds.
  std::vector<std::vector<uint8_t>> receive_all(const std::vector<std::string>& keys, const std::vector<int>& from, double timeout_s, const char* what,
                                                const std::function<void()>& poll) {
    const auto start = Clock::now();
    std::vector<std::vector<uint8_t>> got(keys.size());
    std::vector<bool> have(keys.size(), false);
    size_t left = keys.size();
    for (int round = 0; left > 0; ++round) {
      for (size_t i = 0; i < keys.size(); ++i) {
        if (have[i]) continue;
        if (auto v = client_->get(keys[i], /*take=*/true)) {
          got[i] = std::move(*v);
          have[i] = true;
          --left;
        }
      }
      if (left == 0) break;
      if (auto f = failure()) throw ProcessFailure(f->reason, f->exit_code);
      if (const auto gone = client_->get("gone", /*take=*/false)) {  // processes whose connection closed: no word will come
        std::vector<int> dead;
        for (size_t at = 0; at + sizeof(int) <= gone->size(); at += sizeof(int)) {
          int q = 0;
          std::memcpy(&q, gone->data() + at, sizeof q);
          for (size_t i = 0; i < keys.size(); ++i)
            if (!have[i] && from[i] == q && std::find(dead.begin(), dead.end(), q) == dead.end()) dead.push_back(q);
        }
        if (!dead.empty()) {
          std::string who;
          for (int q : dead) who += (who.empty() ? "" : ", ") + std::to_string(q);
          throw ProcessTimeout(std::string(what) + ": process" + (dead.size() > 1 ? "es " : " ") + who + " ended without a word (its connection to the store closed)", dead);
        }
      }
      if (poll) poll();
      if (timeout_s > 0 && std::chrono::duration<double>(Clock::now() - start).count() > timeout_s) {
        std::vector<int> missing;
        std::string who;
        for (size_t i = 0; i < keys.size(); ++i)
          if (!have[i]) missing.push_back(from[i]), who += (who.empty() ? "" : ", ") + std::to_string(from[i]);
        std::ostringstream os;
        os << what << ": no word from process" << (missing.size() > 1 ? "es " : " ") << who << " within " << timeout_s << " s";
        throw ProcessTimeout(os.str(), missing);
      }
      // A spin first, then short sleeps: a collective costs a few round
      // trips, a long wait little CPU.
      if (round < 50) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(round < 500 ? 50 : 500));
    }
    return got;
  }

  ProcessPlace place_;
  std::unique_ptr<StoreServer> server_;  // process 0's; destroyed after the client
  std::unique_ptr<StoreClient> client_;
  std::mutex mu_;
  std::optional<ProcessStop> failure_;
  int gathers_ = 0;
  std::map<std::string, int> rounds_;
};

}  // namespace

std::unique_ptr<Processes> start_store_processes(const ProcessPlace& place, const std::function<const char*(const char*)>& env) {
  const char* addr = env("MASTER_ADDR");
  const char* port_text = env("MASTER_PORT");
  if (!addr || !*addr || !port_text || !*port_text)
    throw ThunkyError("", "launched as process " + std::to_string(place.index) + " of " + std::to_string(place.count) + " (" + place.from +
                              ") without MASTER_ADDR and MASTER_PORT, which name process 0's host and the port of its store");
  auto port_of = [](const char* name, const char* text) {
    char* end = nullptr;
    const long p = std::strtol(text, &end, 10);
    if (*end || p < 1 || p > 65535) throw ThunkyError("", std::string(name) + "='" + text + "' is not a port (1 to 65535)");
    return static_cast<int>(p);
  };
  int port = port_of("MASTER_PORT", port_text);
  // torchrun's agent may hold MASTER_PORT with its own store: the next port.
  const char* agent = env("TORCHELASTIC_USE_AGENT_STORE");
  if (agent && std::string(agent) == "True") port = port == 65535 ? port - 1 : port + 1;
  if (const char* own = env("THUNKY_STORE_PORT"); own && *own) port = port_of("THUNKY_STORE_PORT", own);
  constexpr double kConnectS = 120;  // processes start within this of each other
  std::unique_ptr<StoreServer> server;
  if (place.index == 0) server = std::make_unique<StoreServer>(port);
  auto client = std::make_unique<StoreClient>(place.index == 0 ? "127.0.0.1" : addr, port, kConnectS);
  client->hello(place.index);
  return std::make_unique<StoreProcesses>(place, std::move(server), std::move(client));
}

}  // namespace thunky
