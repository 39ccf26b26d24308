#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include <unistd.h>

#include "data/error.h"
#include "data/dataset/image_folder.h"
#include "data/dataset/synthetic.h"
#include "test_util.h"

namespace pinfeed::data {
namespace {
namespace fs = std::filesystem;

void touch(const fs::path& p) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << "x";
}

TEST(GeneratedData, EveryOneOf384ClassesLooksDifferentAndTheFirst24AsBefore) {
  std::vector<SyntheticLook> seen;
  for (int c = 0; c < 384; ++c) {
    const SyntheticLook look = synthetic_look(c);
    for (size_t other = 0; other < seen.size(); ++other) ASSERT_FALSE(seen[other] == look) << c << " looks like " << other;
    seen.push_back(look);
    if (c < 24) EXPECT_EQ(look, (SyntheticLook{c % 8, c % 12, 0})) << c;  // the quickstart's 10 classes unchanged
  }
  EXPECT_EQ(synthetic_look(384), synthetic_look(0));
}

// An encoder thread's error is rethrown on the caller's thread once every thread has stopped (one escaping a thread
// would end the process in std::terminate): here a folder standing where a file goes.
TEST(GeneratedData, AnEncoderThreadsErrorReachesTheCallerNamingTheFile) {
  SyntheticOptions o;
  o.out = test::fresh_dir("generated_write_error");
  o.classes = 2, o.train_per_class = 6, o.val_per_class = 0, o.width = o.height = 16, o.threads = 3;
  const fs::path in_the_way = fs::path(o.out) / "train/class_001/000004.jpg";
  fs::create_directories(in_the_way);
  const std::string message = test::message_of<SyntheticWriteError>([&] { generate_synthetic(o); });
  EXPECT_NE(message.find("cannot write " + in_the_way.string()), std::string::npos) << message;
}

TEST(GeneratedData, ASideOutsideItsBoundsIsRefusedBeforeAnyFileIsWritten) {
  SyntheticOptions o;
  o.out = test::fresh_dir("generated_too_large");
  o.classes = 1, o.train_per_class = 1, o.val_per_class = 1, o.width = 100000, o.height = 100000;
  EXPECT_THROW(generate_synthetic(o), std::invalid_argument);
  o.width = o.height = SyntheticOptions::kMinSide - 1;
  EXPECT_THROW(generate_synthetic(o), std::invalid_argument);
  EXPECT_TRUE(fs::is_empty(o.out));
}

TEST(ImageFolder, ClassesAreSortedByNameAndLabelledInOrder) {
  const std::string root = test::fresh_dir("folder_sorted");
  touch(fs::path(root) / "train/zebra/a.jpg");
  touch(fs::path(root) / "train/Apple/b.JPEG");
  touch(fs::path(root) / "train/mango/c.png");
  touch(fs::path(root) / "train/mango/notes.txt");
  const ImageFolder f = scan_image_folder(root, "train");
  ASSERT_EQ(f.classes, (std::vector<std::string>{"Apple", "mango", "zebra"}));  // byte order, as torchvision
  ASSERT_EQ(f.samples.size(), 3u);
  EXPECT_EQ(f.samples[0].label, 0);
  EXPECT_EQ(f.samples[1].label, 1);
  EXPECT_EQ(f.samples[2].label, 2);
}

TEST(ImageFolder, ExtensionsAreCaseInsensitive) {
  EXPECT_TRUE(is_image_file("a.JPG"));
  EXPECT_TRUE(is_image_file("a.Jpeg"));
  EXPECT_TRUE(is_image_file("a.png"));
  EXPECT_FALSE(is_image_file("a.gif"));
  EXPECT_FALSE(is_image_file("jpg"));
}

TEST(ImageFolder, ValSplitUsesTrainLabels) {
  const std::string root = test::fresh_dir("folder_val");
  touch(fs::path(root) / "train/a/1.jpg");
  touch(fs::path(root) / "train/b/1.jpg");
  touch(fs::path(root) / "val/b/1.jpg");
  const ImageFolder train = scan_image_folder(root, "train");
  const ImageFolder val = scan_image_folder(root, "val", &train.classes);
  ASSERT_EQ(val.samples.size(), 1u);
  EXPECT_EQ(val.samples[0].label, 1);
  touch(fs::path(root) / "val/c/1.jpg");
  EXPECT_THROW(scan_image_folder(root, "val", &train.classes), DataError);
}

std::string error_of(const std::string& root, const std::string& split) {
  try {
    scan_image_folder(root, split);
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

TEST(ImageFolder, MissingOrEmptyPartsNameThePath) {
  const std::string root = test::fresh_dir("folder_errors");
  EXPECT_NE(error_of(root + "/nope", "train").find(root + "/nope"), std::string::npos);
  EXPECT_NE(error_of(root, "train").find(root + "/train does not exist"), std::string::npos);
  fs::create_directories(fs::path(root) / "train");
  EXPECT_NE(error_of(root, "train").find("has no class folders"), std::string::npos);
  fs::create_directories(fs::path(root) / "train/empty");
  EXPECT_NE(error_of(root, "train").find(root + "/train/empty holds no"), std::string::npos);
}

TEST(ImageFolder, SymlinkLoopIsRefusedNamingTheLink) {
  const std::string root = test::fresh_dir("folder_loop");
  touch(fs::path(root) / "train/a/1.jpg");
  touch(fs::path(root) / "train/a/deep/2.jpg");
  fs::create_symlink("../..", fs::path(root) / "train/a/deep/loop");  // back to train/
  const std::string e = error_of(root, "train");
  EXPECT_NE(e.find("dataset folder " + root + "/train/a/deep/loop links back to"), std::string::npos) << e;
  EXPECT_NE(e.find("symlink loop"), std::string::npos) << e;
}

TEST(ImageFolder, LinkedFoldersThatAreNoLoopAreFollowed) {
  const std::string root = test::fresh_dir("folder_links");
  touch(fs::path(root) / "elsewhere/x.jpg");
  touch(fs::path(root) / "train/a/1.jpg");
  fs::create_symlink(fs::path(root) / "elsewhere", fs::path(root) / "train/a/linked");
  fs::create_symlink(fs::path(root) / "nowhere", fs::path(root) / "train/a/dangling");
  EXPECT_EQ(scan_image_folder(root, "train").samples.size(), 2u);
}

// Entries named like images that are no regular files are samples too: loading refuses each as a bad image, which
// names it in bad_images.tsv (BadImages.FifoAndOversizedFilesAreRefusedBeforeAnyRead), instead of the scan
// leaving them out unseen.
TEST(ImageFolder, AFifoOrADanglingLinkNamedLikeAnImageIsKeptForTheLoaderToRefuse) {
  const std::string root = test::fresh_dir("folder_special");
  touch(fs::path(root) / "train/a/1.jpg");
  ASSERT_EQ(::mkfifo((fs::path(root) / "train/a/2.jpg").c_str(), 0600), 0);
  fs::create_symlink(fs::path(root) / "nowhere.jpg", fs::path(root) / "train/a/3.jpg");
  EXPECT_EQ(scan_image_folder(root, "train").samples.size(), 3u);
}

TEST(ImageFolder, UnreadableFolderIsADataErrorNamingIt) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads any folder";
  const std::string root = test::fresh_dir("folder_unreadable");
  touch(fs::path(root) / "train/a/1.jpg");
  fs::create_directories(fs::path(root) / "train/a/closed");
  fs::permissions(fs::path(root) / "train/a/closed", fs::perms::none);
  const std::string e = error_of(root, "train");
  fs::permissions(fs::path(root) / "train/a/closed", fs::perms::owner_all);  // so that the cleanup can remove it
  EXPECT_NE(e.find("cannot list dataset folder " + root + "/train/a/closed: Permission denied"), std::string::npos) << e;
}

TEST(ImageFolder, ControlCharactersInPathsAreEscapedInMessages) {
  EXPECT_EQ(printable("a\x1b[2J\nb\x7f"), "a\\x1b[2J\\x0ab\\x7f");
  const std::string e = error_of("/no/such\x1b]0;root", "train");
  EXPECT_NE(e.find("/no/such\\x1b]0;root"), std::string::npos) << e;
  EXPECT_EQ(e.find('\x1b'), std::string::npos) << e;
}

}  // namespace
}  // namespace pinfeed::data
