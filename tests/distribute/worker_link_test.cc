// The parameter server's links between processes (detail/worker_link.h):
// frames and tensors round-trip, a peer that ends or falls silent is a
// PeerFailed that says which, and malformed frames are refused before
// anything is allocated from their claims.
#include "tandem/distribute/detail/worker_link.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <future>
#include <memory>

#include "tandem/base/error.h"

namespace tandem::distribute::detail {
namespace {

struct Pair {
  std::unique_ptr<WorkerLink> a, b;
};

Pair connected_pair() {
  int fds[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  return {std::make_unique<WorkerLink>(fds[0], "peer b"),
          std::make_unique<WorkerLink>(fds[1], "peer a")};
}

TEST(WorkerLink, FramesAndTensorsRoundTrip) {
  Pair p = connected_pair();
  FrameWriter out;
  out.u64(42);
  out.f64(-1.5);
  out.text("tokens");
  out.element({{"image", Tensor::from_floats(Shape{2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6})},
               {"label", Tensor::from_ints(Shape{2}, std::vector<int32_t>{7, 9})}});
  p.a->send(FrameKind::work, {out.bytes()});
  auto [kind, payload] = p.b->receive(5.0);
  EXPECT_EQ(kind, FrameKind::work);
  FrameReader in(payload, "test frame");
  EXPECT_EQ(in.u64(), 42u);
  EXPECT_EQ(in.f64(), -1.5);
  EXPECT_EQ(in.text(), "tokens");
  const data::Element e = in.element();
  EXPECT_EQ(e.at("image").to_floats(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(e.at("label").shape(), Shape{2});
  EXPECT_TRUE(in.done());
}

TEST(WorkerLink, HeartbeatsAreNotFrames) {
  Pair p = connected_pair();
  p.a->send(FrameKind::heartbeat, {});
  p.a->send(FrameKind::stop, {});
  EXPECT_EQ(p.b->receive(5.0).first, FrameKind::stop);
}

TEST(WorkerLink, AnEndedPeerAndASilentOneAreToldApart) {
  {
    Pair p = connected_pair();
    p.a.reset();  // the process ended: its socket closed
    try {
      p.b->receive(5.0);
      ADD_FAILURE() << "no error";
    } catch (const PeerFailed& e) {
      EXPECT_NE(std::string(e.what()).find("peer a closed the connection"), std::string::npos)
          << e.what();
    }
    EXPECT_FALSE(p.b->peer_silent());
  }
  Pair p = connected_pair();
  try {
    p.b->receive(0.2);
    ADD_FAILURE() << "no error";
  } catch (const PeerFailed& e) {
    EXPECT_NE(std::string(e.what()).find("peer a sent nothing for 0.2 s"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(p.b->peer_silent());
}

TEST(WorkerLink, APeerThatTakesNothingIsLostToo) {
  // A stopped peer reads nothing: a frame larger than the sockets' buffers
  // blocked in send() for ever. Now it waits as long as receive() does.
  Pair p = connected_pair();
  p.b->send(FrameKind::stop, {});
  EXPECT_EQ(p.a->receive(0.3).first, FrameKind::stop);  // this link's silence: 0.3 s
  const std::string frame(size_t{64} << 20, 'x');
  auto sending = std::async(std::launch::async, [&] {
    try {
      p.a->send(FrameKind::work, {frame});
      return std::string("sent");
    } catch (const PeerFailed& e) {
      return std::string(e.what());
    }
  });
  if (sending.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    ADD_FAILURE() << "send() still waits after 20 s";
    p.b.reset();  // ends the send, so that the test can end
  }
  EXPECT_NE(sending.get().find("peer b took nothing sent to it for 0.3 s"), std::string::npos);
  EXPECT_TRUE(p.a->peer_silent());
}

TEST(WorkerLink, MalformedFramesAreRefused) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  WorkerLink link(fds[1], "a stranger");
  // A kind tandem does not send, then a length past the cap: refused from
  // the header, before any payload is read or allocated.
  for (const auto& [kind, length] : {std::pair<uint32_t, uint64_t>{99, 0},
                                     std::pair<uint32_t, uint64_t>{2, uint64_t{1} << 40}}) {
    char header[12];
    std::memcpy(header, &kind, 4);
    std::memcpy(header + 4, &length, 8);
    ASSERT_EQ(::write(fds[0], header, sizeof header), 12);
    EXPECT_THROW(link.receive(5.0), IoError);
  }
  ::close(fds[0]);
}

TEST(FrameReader, TruncatedAndImpossibleTensorsAreIoErrors) {
  FrameWriter out;
  out.tensor(Tensor::from_floats(Shape{4}, std::vector<float>{1, 2, 3, 4}));
  const std::string whole = out.bytes();
  FrameReader cut(std::string_view(whole).substr(0, whole.size() - 1), "cut frame");
  EXPECT_THROW(cut.tensor(), IoError);
  // A header claiming 2^60 elements: refused before an allocation.
  FrameWriter huge;
  huge.u64(0);  // f32
  huge.u64(2);
  huge.u64(uint64_t{1} << 30);
  huge.u64(uint64_t{1} << 30);
  FrameReader claims(huge.bytes(), "claims");
  EXPECT_THROW(claims.tensor(), IoError);
  // Bytes of the wrong shape for the tensor they should fill.
  Tensor into = Tensor::zeros(Shape{2, 2}, DType::f32);
  FrameReader wrong(whole, "wrong shape");
  EXPECT_THROW(wrong.tensor_into(into), IoError);
}

}  // namespace
}  // namespace tandem::distribute::detail
