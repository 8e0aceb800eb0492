// kernels/alignment.h: the vector-load alignment check the dispatchers and launchers share.
#include <gtest/gtest.h>

#include "kernels/alignment.h"

TEST(KernelsAlignment, AlignedIsTheAddressModuloTheVectorWidth) {
    alignas(16) unsigned char bytes[32] = {};
    EXPECT_TRUE(varscope::kernels::aligned(bytes, 16));
    EXPECT_TRUE(varscope::kernels::aligned(bytes + 8, 8));
    EXPECT_FALSE(varscope::kernels::aligned(bytes + 8, 16));
    EXPECT_FALSE(varscope::kernels::aligned(bytes + 4, 8));
    EXPECT_TRUE(varscope::kernels::aligned(bytes + 4, 4));
    EXPECT_FALSE(varscope::kernels::aligned(bytes + 1, 2));
    EXPECT_TRUE(varscope::kernels::aligned(bytes + 3, 1));
    EXPECT_TRUE(varscope::kernels::aligned(nullptr, 16));
}
